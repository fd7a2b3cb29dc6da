"""The playground (section 1): a static page at `/` and its assets under `/playground/`, never under /v1; the API
reference at `/docs` (Swagger UI over /schema/openapi.json, vendored in `apidocs/`) under the same policy."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from hypnos.errors import HypnosError, clip
from litestar import Request, Response, get

ASSET_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}\.(html|js|css|svg)$")  # bounded: no OS error on long names
MEDIA_TYPES = {
    "html": "text/html",
    "js": "text/javascript",
    "css": "text/css",
    "svg": "image/svg+xml",
}
# Only the playground's own files run: no inline script or style attribute, no framing. Images and audio may be
# data: or blob: URLs (generated pictures, synthesized speech); API calls go to this origin.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "media-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


def asset(name: str, folder: str = "playground") -> Response[bytes]:
    """One file of the playground (or apidocs) package folder, or 404 not_found for any other name."""
    match = ASSET_NAME.match(name)
    if match is None:
        raise HypnosError(404, "not_found", f"No {folder} file named {clip(name)!r}")
    resource = resources.files("hypnos_server").joinpath(folder, name)
    if not resource.is_file():
        raise HypnosError(404, "not_found", f"No {folder} file named {clip(name)!r}")
    return Response(content=resource.read_bytes(), media_type=MEDIA_TYPES[match.group(1)], headers=HEADERS)


@get("/", sync_to_thread=False, include_in_schema=False)
def playground_page(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The playground page; it needs no key to load (its API calls send the key the user enters)."""
    return asset("index.html")


@get("/playground/{name:str}", sync_to_thread=False, include_in_schema=False)
def playground_asset(request: Request[Any, Any, Any]) -> Response[bytes]:
    """A script or stylesheet of the playground."""
    return asset(request.path_params["name"])


@get("/docs", sync_to_thread=False, include_in_schema=False)
def docs_page(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The browsable API reference (open, like /schema/openapi.json)."""
    return asset("index.html", "apidocs")


@get("/docs/{name:str}", sync_to_thread=False, include_in_schema=False)
def docs_asset(request: Request[Any, Any, Any]) -> Response[bytes]:
    """A script or stylesheet of the API reference."""
    return asset(request.path_params["name"], "apidocs")


ROUTES = [playground_page, playground_asset, docs_page, docs_asset]
