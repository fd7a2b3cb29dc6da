"""The server's own routes: health, models, memory, the OpenAI-compatible inference routes and the playground."""

from __future__ import annotations

from typing import Any

from hypnos_server.routes import (
    audio,
    chat,
    conversations,
    embeddings,
    health,
    images,
    memory,
    messages,
    models,
    playground,
    pool,
    rerank,
    responses,
    responses_compact,
    responses_socket,
    responses_stored,
)


def server_routes() -> list[Any]:
    """Every route handler the server itself provides."""
    from hypnos_server import realtime  # it builds on the routes' inference runner

    return [
        *health.ROUTES,
        *models.ROUTES,
        *pool.ROUTES,
        *memory.ROUTES,
        *chat.ROUTES,
        *responses.ROUTES,
        *responses_compact.ROUTES,
        *responses_socket.ROUTES,
        *responses_stored.ROUTES,
        *conversations.ROUTES,
        *messages.ROUTES,
        *embeddings.ROUTES,
        *rerank.ROUTES,
        *audio.ROUTES,
        *images.ROUTES,
        *playground.ROUTES,
        *realtime.ROUTES,
    ]
