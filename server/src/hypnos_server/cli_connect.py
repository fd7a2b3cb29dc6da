"""Where the `hypnos` client commands find their server and config: --url, $HYPNOS_URL, else the config's host and
port; --config, $HYPNOS_CONFIG, else ./hypnos.toml or ./hypnos.starter.toml (what `./run.sh` serves)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from hypnos.config import Settings, load_settings
from hypnos.overlay import PoolOverlay, load_pool

DEFAULT_CONFIGS = ("hypnos.toml", "hypnos.starter.toml")
URL_ENV = "HYPNOS_URL"
KEY_ENV = "HYPNOS_API_KEY"


class ClientError(Exception):
    """A client command's failure, said in one line."""


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """--url, --api-key and --config for a client command."""
    parser.add_argument("--url", help=f"the server (default: ${URL_ENV}, else the config's host and port)")
    parser.add_argument("--api-key", help=f"the API key (default: ${KEY_ENV}, else the config's first admin key)")
    parser.add_argument(
        "--config",
        dest="client_config",
        help="the config (default: $HYPNOS_CONFIG, ./hypnos.toml, else ./hypnos.starter.toml)",
    )


def config_path(given: str | None) -> Path | None:
    """The config file a client command reads, when there is one."""
    chosen = given or os.environ.get("HYPNOS_CONFIG")
    if chosen:
        return Path(chosen).expanduser().resolve()
    for name in DEFAULT_CONFIGS:
        if Path(name).is_file():
            return Path(name).resolve()
    return None


@dataclass
class Target:
    """The config (maybe none) and the server a client command talks to."""

    config: Path | None
    settings: Settings
    overlay: PoolOverlay
    url: str
    api_key: str | None

    def client(self, timeout: float | None = 30.0) -> Any:
        """An httpx client on the server's base URL, with the key when there is one."""
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def server_up(self) -> bool:
        """Whether a Hypnos server answers /health at the URL."""
        import httpx

        try:
            return httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def get(self, path: str) -> Any:
        """GET a JSON route; ClientError with the server's message on an error status."""
        with self.client() as client:
            return answer_of(client.get(path))

    def need_server(self) -> None:
        """ClientError naming how to start one when no server answers."""
        if not self.server_up():
            raise ClientError(
                f"no Hypnos server answers at {self.url}: start one with `./run.sh` or `hypnos serve --config FILE` "
                f"(or point --url / ${URL_ENV} at it)"
            )


def answer_of(response: Any) -> Any:
    """The JSON body of a success; ClientError with the API's error message otherwise."""
    if response.status_code < 400:
        return response.json() if response.content else {}
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text.strip()[:500]
    raise ClientError(f"the server answered {response.status_code}: {message}")


def target_of(args: argparse.Namespace) -> Target:
    """The target named by a client command's arguments and the environment."""
    path = config_path(getattr(args, "client_config", None))
    settings, overlay = load_pool(load_settings(path) if path else Settings())
    url = getattr(args, "url", None) or os.environ.get(URL_ENV)
    if not url:
        host = settings.server.host
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        scheme = "https" if settings.server.tls else "http"
        url = f"{scheme}://{host}:{settings.server.port}"
    key = getattr(args, "api_key", None) or os.environ.get(KEY_ENV) or _admin_key(settings)
    return Target(config=path, settings=settings, overlay=overlay, url=url.rstrip("/"), api_key=key)


def _admin_key(settings: Settings) -> str | None:
    """The config's first admin key (the operator's own), when it has one."""
    if settings.server.api_keys:
        return settings.server.api_keys[0]
    admins = [entry.key for entry in settings.server.keys if entry.admin]
    return admins[0] if admins else None


def to_builtins(value: Any) -> Any:
    """A Struct as plain data."""
    return msgspec.to_builtins(value)
