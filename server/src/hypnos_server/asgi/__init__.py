"""ASGI layers in front of Litestar: request id and record, CORS, body and time limits, auth and per-key limits."""
