"""The `hypnos` command: `serve` (granian, one worker), `starter`, `--version`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from hypnos.config import ConfigError, load_settings
from hypnos.options import check_engine_options
from hypnos.plugins import allow_list_from_env, collect_engine_kinds, make_plugin_manager

from hypnos_server.app import server_version
from hypnos_server.starter import write_starter_config

logger = logging.getLogger(__name__)

APP_TARGET = "hypnos_server.app:app_factory"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hypnos", description="Hypnos: a local multi-modal AI server")
    parser.add_argument("--version", action="version", version=f"hypnos {server_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the API (default port 9999)")
    serve.add_argument("--config", help="the TOML config (default: $HYPNOS_CONFIG, else built-in defaults)")
    serve.add_argument("--host", help="address to bind (default: server.host)")
    serve.add_argument("--port", type=int, help="port to listen on (default: server.port, $HYPNOS_PORT, 9999)")
    starter = commands.add_parser("starter", help="write a config with the installed plugins' starter models")
    starter.add_argument("--models-dir", required=True, type=Path, help="where the starter models go")
    starter.add_argument("--out", required=True, type=Path, help="the config file to write")
    return parser


def serve(config: str | None, host: str | None, port: int | None) -> int:
    """Check the config, then run granian (ASGI, one worker) on the app factory."""
    if config:
        os.environ["HYPNOS_CONFIG"] = str(Path(config).expanduser().resolve())
    if port is not None:
        os.environ["HYPNOS_PORT"] = str(port)
    try:
        settings = load_settings()
        check_engine_options(settings, collect_engine_kinds(make_plugin_manager(allow=allow_list_from_env())))
    except ConfigError as error:
        sys.stderr.write(f"hypnos: bad config: {error}\n")
        return 2
    from granian import Granian
    from granian.constants import Interfaces

    tls = settings.server.tls
    server = Granian(
        APP_TARGET,
        address=host or settings.server.host,
        port=settings.server.port,
        interface=Interfaces.ASGI,
        workers=1,
        factory=True,
        ssl_cert=Path(tls.cert_path) if tls else None,
        ssl_key=Path(tls.key_path) if tls else None,
    )
    server.serve()
    return 0


def starter(models_dir: Path, out: Path) -> int:
    """Write the starter config of every installed plugin."""
    count = write_starter_config(make_plugin_manager(allow=allow_list_from_env()), models_dir, out)
    sys.stdout.write(f"hypnos: wrote {out} with {count} starter model(s)\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `hypnos` script."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        return serve(args.config, args.host, args.port)
    return starter(args.models_dir, args.out)


if __name__ == "__main__":
    sys.exit(main())
