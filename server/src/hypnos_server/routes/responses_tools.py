"""The tools of a Responses request: function and namespace tools as the functions the model sees, hosted tools the
server cannot run dropped (and named), and the tools echoed in the spec's FunctionTool shape."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from hypnos.errors import clip, invalid_request
from hypnos.openai import FunctionDefinition, ToolDefinition

logger = logging.getLogger(__name__)

# Tools OpenAI runs on its side (or a client runs from a grammar or an action type Hypnos does not emit): a model here
# cannot call them, so they are left out of what it sees and named in DROPPED_HEADER.
HOSTED_TOOLS = {
    "web_search",
    "web_search_preview",
    "web_search_2025_08_26",
    "web_search_preview_2025_03_11",
    "file_search",
    "code_interpreter",
    "computer_use_preview",
    "computer",
    "computer_use",
    "image_generation",
    "mcp",
    "local_shell",
    "shell",
    "apply_patch",
    "custom",
    "tool_search",
}
DROPPED_HEADER = "x-hypnos-dropped-tools"
SEPARATORS = ("_", ".", "-", ":", "/")


def flat_name(namespace: str | None, name: str) -> str:
    """The one function name the model sees for `name` in `namespace`: joined by `__` unless the namespace already
    ends with a separator (Codex's MCP namespaces end with `__`)."""
    if not namespace:
        return name
    return f"{namespace}{name}" if namespace.endswith(SEPARATORS) else f"{namespace}__{name}"


def _function(tool: dict[str, Any], where: str) -> dict[str, Any]:
    """A function tool in the spec's FunctionTool shape (every field present: description, parameters, strict)."""
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise invalid_request(f"Missing required field `{where}.name`")
    parameters = tool.get("parameters")
    description = tool.get("description")
    strict = tool.get("strict")
    return {
        "type": "function",
        "name": name,
        "description": description if isinstance(description, str) else None,
        "parameters": parameters if isinstance(parameters, dict) else None,
        "strict": strict if isinstance(strict, bool) else None,
    }


@dataclass
class ToolSet:
    """What a request's `tools` mean here: the functions the model sees (flat names), the spec-shaped echo of each,
    the hosted tools dropped, and for a flat name its namespace and own name."""

    functions: list[ToolDefinition] = field(default_factory=list)
    echo: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    origin: dict[str, tuple[str, str]] = field(default_factory=dict)
    max_calls: int | None = None  # `max_tool_calls`: the calls past it are left out of the output

    def keeps(self, made: int) -> bool:
        """Whether a call after `made` earlier ones goes out (`max_tool_calls`)."""
        return self.max_calls is None or made < self.max_calls

    def _add(self, tool: dict[str, Any], namespace: str | None) -> None:
        flat = flat_name(namespace, tool["name"])
        if flat in self.origin or any(f.function.name == flat for f in self.functions):
            raise invalid_request(f"The tool name `{clip(flat)}` is declared twice")
        if namespace:
            self.origin[flat] = (namespace, tool["name"])
        self.functions.append(
            ToolDefinition(
                function=FunctionDefinition(name=flat, description=tool["description"], parameters=tool["parameters"])
            )
        )
        self.echo.append({**tool, "name": flat})

    def headers(self) -> dict[str, str]:
        """DROPPED_HEADER naming the hosted tools left out (none: no header)."""
        return {DROPPED_HEADER: ",".join(dict.fromkeys(self.dropped))} if self.dropped else {}

    def name_call(self, item: dict[str, Any]) -> dict[str, Any]:
        """A function_call item named as the client declared it: a namespaced tool's own name and its `namespace`."""
        origin = self.origin.get(item.get("name", ""))
        if origin is None:
            return item
        return {**item, "name": origin[1], "namespace": origin[0]}


def read_tools(tools: list[dict[str, Any]] | None) -> ToolSet:
    """The ToolSet of a request's `tools`; a tool of an unknown type or without a name is a 400 naming it."""
    found = ToolSet()
    for index, tool in enumerate(tools or []):
        where = f"tools[{index}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            found._add(_function(tool, where), None)
        elif kind == "namespace":
            namespace, members = tool.get("name"), tool.get("tools")
            if not isinstance(namespace, str) or not namespace or not isinstance(members, list):
                raise invalid_request(f"`{where}` (namespace) needs a `name` and a `tools` array")
            for position, member in enumerate(members):
                inner = f"{where}.tools[{position}]"
                if not isinstance(member, dict) or member.get("type", "function") != "function":
                    kind_of = member.get("type") if isinstance(member, dict) else None
                    found.dropped.append(str(kind_of))
                    logger.debug("dropped %s from namespace %s: not a function", clip(kind_of), clip(namespace))
                    continue
                found._add(_function(member, inner), namespace)
        elif kind in HOSTED_TOOLS:
            found.dropped.append(kind)
            logger.debug("dropped the hosted tool %s: this server cannot run it", kind)
        else:
            raise invalid_request(f"Invalid value for `{where}.type`: `{clip(kind)}`")
    return found
