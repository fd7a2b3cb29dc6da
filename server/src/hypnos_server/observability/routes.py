"""GET /metrics and the request log routes (GET /v1/logs, GET /v1/logs/{id}, DELETE /v1/logs, POST /v1/logs/level)."""

from __future__ import annotations

from typing import Any

import msgspec
from hypnos.errors import invalid_request, not_found
from litestar import Request, Response, delete, get, post

from hypnos_server.asgi.auth import ADMIN_OPT
from hypnos_server.observability.hub import Observability
from hypnos_server.observability.metrics import CONTENT_TYPE
from hypnos_server.state import request_context


class LevelBody(msgspec.Struct):
    """POST /v1/logs/level body."""

    level: str


def _json(obj: Any) -> Response[bytes]:
    return Response(content=msgspec.json.encode(obj), media_type="application/json")


def _limit(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise invalid_request(f"limit must be a positive integer, got `{raw}`") from None


def tenant_of(request: Request[Any, Any, Any]) -> str | None:
    """The label whose records a caller may read: a non-admin key's own; None (every record) for admins or no auth."""
    key = request_context(request).key
    return key.label if key is not None and not key.admin else None


def observability_routes(obs: Observability) -> list[Any]:
    """The route handlers bound to one app's Observability."""

    @get("/metrics")
    async def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
        """Prometheus text exposition (format 0.0.4); on a Ray cluster also every node's families, by node."""
        text = obs.metrics.render()
        cluster = request.app.state.hypnos.cluster
        if cluster is not None:
            from hypnos_server.cluster.metrics import node_metrics_text

            text += node_metrics_text(await cluster.node_statuses())
        # the header is set whole: Litestar appends `; charset=utf-8` to a text/ media_type, repeating the parameter
        return Response(content=text, media_type=CONTENT_TYPE, headers={"content-type": CONTENT_TYPE})

    @get("/v1/logs", sync_to_thread=False)
    def list_logs(request: Request[Any, Any, Any]) -> Response[bytes]:
        """Stored records matching ?model=&route=&status=ok|error|4xx|5xx&key=&limit=, newest first (a non-admin
        key's own only)."""
        query = request.query_params
        page = obs.log.query(
            model=query.get("model") or None,
            route=query.get("route") or None,
            status=query.get("status") or None,
            key=query.get("key") or None,
            limit=_limit(query.get("limit")),
            tenant=tenant_of(request),
        )
        return _json(page)

    @get("/v1/logs/{id:str}", sync_to_thread=False)
    def get_log(request: Request[Any, Any, Any]) -> Response[bytes]:
        """One record by its x-request-id, or 404 not_found (also for another key's record, asked by a non-admin)."""
        request_id = request.path_params["id"]
        record = obs.log.get(request_id, tenant=tenant_of(request))
        if record is None:
            raise not_found(f"No request log record with id `{request_id}` (it may have been evicted or cleared)")
        return _json(record)

    @delete("/v1/logs", status_code=200, sync_to_thread=False, opt={ADMIN_OPT: True})
    def clear_logs() -> Response[bytes]:
        """Drop every stored record."""
        obs.log.clear()
        return _json({"cleared": True})

    @post("/v1/logs/level", status_code=200, opt={ADMIN_OPT: True})
    async def set_level(request: Request[Any, Any, Any]) -> Response[bytes]:
        """Change what the next calls capture: off, error, warn, info, debug or trace."""
        body = await request.body()
        try:
            level = msgspec.json.decode(body, type=LevelBody).level
        except (msgspec.ValidationError, msgspec.DecodeError):
            raise invalid_request('send {"level": "off|error|warn|info|debug|trace"}') from None
        return _json({"level": obs.log.set_level(level)})

    return [metrics, list_logs, get_log, clear_logs, set_level]
