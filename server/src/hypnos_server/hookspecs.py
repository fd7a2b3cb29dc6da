"""The hook the server adds for plugins: web routes (core has no web notion). The server's plugin loading adds this
module to the manager beside core's hookspecs, so a plugin's `hypnos_routes` is a known hook once the server is
installed; a plugin that implements it declares `hypnos-server` in its dependencies."""

from __future__ import annotations

from typing import Any

from hypnos.hookspecs import hookspec


@hookspec
def hypnos_routes() -> list[Any]:
    """Called once when the app is built: Litestar routers or handlers for routes that belong to this plugin alone.

    Handlers reach models through `hypnos_server.plugin_api` (InferenceRun, model_leases, ...).
    """
    raise NotImplementedError
