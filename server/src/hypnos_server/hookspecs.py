"""The hooks the server adds for plugins: web routes and realtime speech detectors (core has no web notion). The
server's plugin loading adds this module to the manager beside core's hookspecs, so these are known hooks once the
server is installed; a plugin that implements one declares `hypnos-server` in its dependencies."""

from __future__ import annotations

from typing import Any

from hypnos.hookspecs import hookspec


@hookspec
def hypnos_routes() -> list[Any]:
    """Called once when the app is built: Litestar routers or handlers for routes that belong to this plugin alone.

    Handlers reach models through `hypnos_server.plugin_api` (InferenceRun, model_leases, ...); a handler (or router)
    with `opt={plugin_api.ADMIN_OPT: True}` answers admin keys only.
    """
    raise NotImplementedError


@hookspec
def hypnos_speech_detectors() -> list[Any]:
    """Called once when the app is built: speech detectors for the realtime server VAD, as
    `hypnos_server.plugin_api.SpeechDetectorKind`s (a name, a factory taking the session's threshold, a description).

    The first one offered is the default unless `server.realtime_vad` names another; `energy` is built in.
    """
    raise NotImplementedError
