"""Raw paths of refused requests mapped back to route templates (bounded metric labels)."""

from __future__ import annotations

from hypnos_server.observability.route_templates import RouteTemplates


def test_resolves_static_dynamic_and_path_parameters() -> None:
    templates = RouteTemplates(
        ["/v1/models", "/v1/models/catalog", "/v1/models/{model_id:str}", "/v1/logs/{id:str}", "/files/{rest:path}"]
    )
    assert templates.resolve("/v1/models") == "/v1/models"
    assert templates.resolve("/v1/models/") == "/v1/models"
    assert templates.resolve("/v1/models/catalog") == "/v1/models/catalog"
    assert templates.resolve("/v1/models/qwen") == "/v1/models/{model_id:str}"
    assert templates.resolve("/v1/logs/req-1") == "/v1/logs/{id:str}"
    assert templates.resolve("/files/a/b/c") == "/files/{rest:path}"
    assert templates.resolve("/v1/logs/a/b") is None
    assert templates.resolve("/nowhere") is None
