"""The server's plugin loading: its routes hook is known, plugin routes are served, plugin_api stays narrow."""

from __future__ import annotations

from hypnos.hookspecs import hookimpl
from hypnos.plugins import make_plugin_manager
from hypnos.testing import fake_plugin
from hypnos_server import plugin_api
from hypnos_server.plugin_loading import load_server_plugins
from litestar import get
from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready


class _Hello:
    @hookimpl
    def hypnos_routes(self) -> list:
        @get("/v1/hello", sync_to_thread=False)
        def hello() -> dict:
            return {"hello": True}

        return [hello]


def test_a_plugins_routes_hook_is_valid_with_the_server_and_its_route_is_served() -> None:
    assert load_server_plugins(autoload=False, plugins=[fake_plugin, _Hello()]).problems == []
    with TestClient(build_app(config(), plugins=[_Hello()])) as client:
        wait_ready(client)
        assert client.get("/v1/hello").json() == {"hello": True}


def test_a_manager_built_by_core_alone_still_serves_plugin_routes() -> None:
    from hypnos.config import settings_from_mapping
    from hypnos_server.app import create_app

    manager = make_plugin_manager(autoload=False, plugins=[fake_plugin, _Hello()])
    raw = config()
    raw.setdefault("server", {})["isolation"] = "thread"
    app = create_app(settings_from_mapping(raw), manager)
    with TestClient(app) as client:
        wait_ready(client)
        assert client.get("/v1/hello").status_code == 200


def test_plugin_api_does_not_hand_out_the_scheduler_class() -> None:
    assert "Scheduler" not in plugin_api.__all__ and not hasattr(plugin_api, "Scheduler")
    assert {"model_leases", "check_serving", "engine_table", "InferenceRun"} <= set(plugin_api.__all__)
