"""Path tricks for the auth tests: non-canonical spellings of a route's path, and the app's own route list."""

from __future__ import annotations

import re
from collections.abc import Iterator


def tricks(path: str) -> Iterator[tuple[str, bytes]]:
    """(scope path, raw path) pairs that a lax router could read as `path`."""
    rest = path[1:]
    first, _, tail = rest.partition("/")
    yield "/" + path, ("/" + path).encode()
    yield "//" + path, ("//" + path).encode()
    yield "/" + path, ("/%2F" + rest).encode()
    yield "/" + path, ("/%2f" + rest).encode()
    yield "/./" + rest, ("/./" + rest).encode()
    yield "/./" + rest, ("/%2e/" + rest).encode()
    yield "/x/../" + rest, ("/x/../" + rest).encode()
    yield "/x/../" + rest, ("/x/%2E%2E/" + rest).encode()
    yield path + "/.", (path + "/.").encode()
    yield "/\\" + rest, ("/\\" + rest).encode()
    yield "/\\" + rest, ("/%5C" + rest).encode()
    if tail:
        yield f"/{first}/./{tail}", f"/{first}/./{tail}".encode()
        yield f"/{first}//{tail}", f"/{first}//{tail}".encode()
        yield f"/{first}/{tail}", f"/{first}%2F{tail}".encode()
        yield f"/{first}\\{tail}", f"/{first}\\{tail}".encode()
        yield f"/{first}/../{first}/{tail}", f"/{first}/../{first}/{tail}".encode()


def app_routes(app) -> list[tuple[str, str]]:
    """(method, concrete path) of every route the app answers, path parameters filled in."""
    pairs = []
    for route in app.routes:
        path = re.sub(r"\{[^}]+\}", "fake-chat", route.path)
        for method in sorted(getattr(route, "methods", ())):
            if method not in ("OPTIONS", "HEAD"):
                pairs.append((method, path))
    return pairs
