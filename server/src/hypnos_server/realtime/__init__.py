"""Realtime voice: GET /v1/realtime over WebSocket, the OpenAI Realtime event protocol over the pool's models."""

from hypnos_server.realtime.route import ROUTES

__all__ = ["ROUTES"]
