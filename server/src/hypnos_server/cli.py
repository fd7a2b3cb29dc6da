"""The `hypnos` command: `serve` (granian, one worker), `starter`, `models pull`, `advise`, `plugins`,
`--catalog-block`, `--version`, and the client commands `run`, `ls`, `ps`, `pull`, `show`, `add`, `rm`."""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from pathlib import Path

import msgspec
from hypnos.config import ConfigError, HardwareConfig, load_settings
from hypnos.errors import HypnosError
from hypnos.hardware import SystemHardware
from hypnos.options import check_engine_options
from hypnos.overlay import load_pool
from hypnos.plugins import allow_list_from_env, collect_engine_kinds

from hypnos_server import cli_chat, cli_models
from hypnos_server.advisor import NEEDS, AdvisorRequest, advise, config_text, machine_for
from hypnos_server.app import RAY_ADDRESS_ENV, server_version
from hypnos_server.catalog import Catalog, shipped_catalog_path
from hypnos_server.cli_connect import ClientError, add_connection_arguments, target_of
from hypnos_server.download import DownloadError, pull
from hypnos_server.lifeline import holder_of, port_in_use
from hypnos_server.plugin_list import plugins_report, render_report
from hypnos_server.plugin_loading import installed_plugin_manager, load_server_plugins
from hypnos_server.realtime.detectors import collect_speech_detectors
from hypnos_server.starter import write_starter_config

logger = logging.getLogger(__name__)

APP_TARGET = "hypnos_server.app:app_factory"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hypnos", description="Hypnos: a local multi-modal AI server")
    parser.add_argument("--version", action="version", version=f"hypnos {server_version()}")
    parser.add_argument("--catalog-block", metavar="ID[:QUANT]", help="print a catalog variant's [[models]] block")
    parser.add_argument("--catalog", type=Path, help="the model catalog file (default: the one shipped)")
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", help="serve the API (default port 9999)")
    serve.add_argument("--config", help="the TOML config (default: $HYPNOS_CONFIG, else built-in defaults)")
    serve.add_argument("--host", help="address to bind (default: server.host)")
    serve.add_argument("--port", type=int, help="port to listen on (default: server.port, $HYPNOS_PORT, 9999)")
    serve.add_argument(
        "--ray", metavar="ADDRESS", help="serve from a Ray cluster (the [ray] extra): join ADDRESS, 'local' starts one"
    )
    starter = commands.add_parser("starter", help="write a config with the installed plugins' starter models")
    starter.add_argument("--models-dir", required=True, type=Path, help="where the starter models go")
    starter.add_argument("--out", required=True, type=Path, help="the config file to write")
    models = commands.add_parser("models", help="the model files in models_dir")
    pull = models.add_subparsers(dest="models_command", required=True).add_parser(
        "pull", help="download a catalog variant's files into models_dir"
    )
    pull.add_argument("spec", metavar="ID[:QUANT]")
    pull.add_argument("--config", help="the TOML config naming models_dir (default: $HYPNOS_CONFIG)")
    pull.add_argument("--models-dir", type=Path, help="the models folder (default: the config's models_dir)")
    pull.add_argument("--catalog", type=Path, dest="pull_catalog", help=argparse.SUPPRESS)
    listing = commands.add_parser("plugins", help="the installed plugins, their engine kinds and routes, and failures")
    listing.add_argument("--json", action="store_true", dest="plugins_json", help="print the list as JSON")
    advise = commands.add_parser("advise", help="recommend a lineup and config from the catalog")
    advise.add_argument("--needs", required=True, help="comma-separated: " + ", ".join(NEEDS))
    advise.add_argument("--vram", type=_size, help="GPU memory, e.g. 24G (default: this machine's)")
    advise.add_argument("--ram", type=_size, help="system memory, e.g. 64G (default: this machine's)")
    advise.add_argument("--unified", action="store_true", help="unified memory (Apple Silicon): --vram is ignored")
    shown = advise.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print the advisor's JSON answer")
    shown.add_argument("--config", action="store_true", help="print only the generated config file")
    advise.add_argument("--catalog", type=Path, dest="advise_catalog", help=argparse.SUPPRESS)
    cli_chat.register(commands)
    cli_models.register(commands)
    fetch = commands.add_parser("pull", help="download a catalog model (resumable) and add it to a running server")
    fetch.add_argument("spec", metavar="ID[:QUANT]")
    fetch.add_argument("--models-dir", type=Path, help="the models folder (default: the config's models_dir)")
    add_connection_arguments(fetch)
    return parser


def _size(text: str) -> int:
    """`24G`, `512M`, `64GiB` or plain bytes."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}.get(value[-1:], 1)
    try:
        return int(float(value.rstrip("KMGT")) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 24G)") from None


def advise_command(args: argparse.Namespace) -> int:
    """Print the advised lineup (a summary, --json, or --config)."""
    catalog = _catalog(args.advise_catalog or args.catalog)
    info = SystemHardware(HardwareConfig()).info()
    request = AdvisorRequest(
        needs=[n.strip() for n in args.needs.split(",") if n.strip()],
        vram_bytes=None if args.unified else args.vram,
        ram_bytes=args.ram,
        unified_memory=True if args.unified else (False if args.vram is not None else None),
    )
    answer = advise(catalog, request.needs, machine_for(request, info))
    answer["config"] = config_text(catalog, answer)
    if args.json:
        sys.stdout.write(msgspec.json.encode(answer).decode() + "\n")
    elif args.config:
        sys.stdout.write(answer["config"])
    else:
        for model in answer["models"]:
            sys.stdout.write(
                f"{model['id']} ({model['quant']}): {', '.join(model['serves'])}; {model['initial_tier']}, "
                f"{model['gpu_layers']}/{model['num_layers']} layers on the GPU\n"
            )
        for warning in answer["warnings"]:
            sys.stdout.write(f"warning: {warning}\n")
        sys.stdout.write("\n" + answer["config"])
    return 0


def serve(config: str | None, host: str | None, port: int | None) -> int:
    """Check the config, then run granian (ASGI, one worker) on the app factory."""
    if config:
        os.environ["HYPNOS_CONFIG"] = str(Path(config).expanduser().resolve())
    if port is not None:
        os.environ["HYPNOS_PORT"] = str(port)
    try:
        settings, _ = load_pool(load_settings())
        plugins = load_server_plugins(allow=allow_list_from_env())
        if plugins.problems and settings.server.plugin_errors == "fail":
            for problem in plugins.problems:
                sys.stderr.write(f'hypnos: {problem.line()} (server.plugin_errors = "warn" starts anyway)\n')
            return 2
        for problem in plugins.problems:
            sys.stderr.write(f"hypnos: warning: {problem.line()}\n")
        check_engine_options(settings, collect_engine_kinds(plugins.manager))
        collect_speech_detectors(plugins.manager, settings.server.realtime_vad)
    except ConfigError as error:
        sys.stderr.write(f"hypnos: bad config: {error}\n")
        return 2
    address, listen = host or settings.server.host, settings.server.port
    if port_in_use(address, listen):
        holder = holder_of(address, listen)
        sys.stderr.write(f"hypnos: {address}:{listen} is already in use by {holder}; stop it or pick another --port\n")
        return 1
    from granian import Granian
    from granian.constants import Interfaces

    tls = settings.server.tls
    server = Granian(
        APP_TARGET,
        address=address,
        port=listen,
        interface=Interfaces.ASGI,
        workers=1,
        factory=True,
        # a worker that dies (killed, out of memory) is started again: it restages the models, whose engine hosts
        # died with it (PR_SET_PDEATHSIG), instead of the whole server exiting
        respawn_failed_workers=True,
        respawn_interval=1.0,
        # SIGTERM: the worker stops within shutdown_grace_secs (hypnos_server.shutdown); this kill is the backstop
        # for an in-process engine stuck in native code, which no cancellation reaches
        workers_kill_timeout=math.ceil(settings.server.shutdown_grace_secs) + 2,
        ssl_cert=Path(tls.cert_path) if tls else None,
        ssl_key=Path(tls.key_path) if tls else None,
    )
    server.serve()
    return 0


def plugins_command(as_json: bool) -> int:
    """List the installed plugins (those HYPNOS_PLUGINS allows) and what failed to load; 1 when something failed."""
    report = plugins_report(load_server_plugins(allow=allow_list_from_env()))
    if as_json:
        sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    else:
        sys.stdout.write(render_report(report))
    return 1 if report.failed else 0


def starter(models_dir: Path, out: Path) -> int:
    """Write the starter config of every installed plugin."""
    count = write_starter_config(installed_plugin_manager(), models_dir, out)
    sys.stdout.write(f"hypnos: wrote {out} with {count} starter model(s)\n")
    return 0


def _catalog(path: Path | None) -> Catalog:
    catalog = Catalog.load(path or shipped_catalog_path(), installed_plugin_manager())
    if catalog is None:
        raise HypnosError(404, "not_found", f"no model catalog at {path or shipped_catalog_path()}")
    return catalog


def catalog_block(spec: str, path: Path | None) -> int:
    """Print the [[models]] block of a catalog variant."""
    catalog = _catalog(path)
    entry, variant = catalog.find(spec)
    sys.stdout.write(catalog.config_block(entry, variant))
    return 0


def models_pull(spec: str, config: str | None, models_dir: Path | None, path: Path | None) -> int:
    """Download a catalog variant's files into models_dir (given, else the config's)."""
    folder = models_dir.expanduser().resolve() if models_dir else load_settings(config).models_path
    report = pull(_catalog(path), spec, folder, sys.stderr)
    for local in report.outdated:
        sys.stderr.write(f"hypnos: {local} is outdated (its size differs from the catalog's)\n")
    sys.stdout.write(f"hypnos: {spec}: {len(report.fetched)} fetched, {len(report.present)} already present\n")
    return 0


def pull_command(args: argparse.Namespace) -> int:
    """`hypnos pull`: `models pull` into the server's models folder (else the config's), then add it to the server."""
    target = target_of(args)
    up = target.server_up()
    folder = args.models_dir
    if folder is None and up:
        folder = Path(target.get("/v1/models/catalog")["models_dir"])
    models_pull(args.spec, str(target.config) if target.config else None, folder, args.catalog)
    if up:
        entry, _ = _catalog(args.catalog).find(args.spec)
        configured = {m["id"] for m in target.get("/v1/memory/status")["models"]}
        if entry.id not in configured:
            with target.client(timeout=None) as client:
                added = client.post("/v1/models", json={"catalog": args.spec})
            if added.status_code < 400:
                sys.stdout.write(f"hypnos: added `{entry.id}` to the server at {target.url}\n")
            else:
                sys.stdout.write(f"hypnos: not added to the server ({added.text[:300]})\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `hypnos` script."""
    parser = _parser()
    args = parser.parse_args(argv)
    quiet = args.command in ("run", "ls", "ps", "pull", "show", "add", "rm")  # client commands: no httpx lines
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        if args.catalog_block:
            return catalog_block(args.catalog_block, args.catalog)
        if args.command == "serve":
            if args.ray:
                os.environ[RAY_ADDRESS_ENV] = args.ray
            return serve(args.config, args.host, args.port)
        if args.command == "starter":
            return starter(args.models_dir, args.out)
        if args.command == "models":
            return models_pull(args.spec, args.config, args.models_dir, args.pull_catalog or args.catalog)
        if args.command == "advise":
            return advise_command(args)
        if args.command == "plugins":
            return plugins_command(args.plugins_json)
        if args.command == "run":
            return cli_chat.run_command(args)
        if args.command == "pull":
            return pull_command(args)
        if args.command in cli_models.COMMANDS:
            return cli_models.COMMANDS[args.command](args)
    except (HypnosError, ConfigError, DownloadError, ClientError) as error:
        sys.stderr.write(f"hypnos: {getattr(error, 'message', error)}\n")
        return 1
    parser.error("a command is needed (serve, run, ls, ps, pull, show, add, rm, starter, models, advise, plugins)")
    return 2


if __name__ == "__main__":
    sys.exit(main())
