"""Route templates for requests the router never saw (refused by auth or limits): a raw path -> its template."""

from __future__ import annotations

import re
from collections.abc import Iterable

from hypnos_server.asgi.paths import TEMPLATE_PARAM, template_pattern


class RouteTemplates:
    """Resolves a raw path to the route template that would serve it (exact paths first, then the most literal)."""

    def __init__(self, templates: Iterable[str]) -> None:
        self._static: set[str] = set()
        dynamic: list[tuple[str, re.Pattern[str]]] = []
        for template in set(templates):
            if "{" in template:
                dynamic.append((template, template_pattern(template)))
            else:
                self._static.add(template.rstrip("/") or "/")
        # more literal characters first: /v1/models/catalog wins over /v1/models/{id}
        dynamic.sort(key=lambda item: -len(TEMPLATE_PARAM.sub("", item[0])))
        self._dynamic = dynamic

    def resolve(self, path: str) -> str | None:
        """The template serving `path`, or None when no route matches."""
        clean = path.rstrip("/") or "/"
        if clean in self._static:
            return clean
        for template, pattern in self._dynamic:
            if pattern.match(clean):
                return template
        return None
