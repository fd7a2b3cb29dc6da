"""The tools of a Messages request: custom tools as functions; Anthropic's client tools that a client runs from a fixed
schema (bash, the text editor) as functions with the schema Anthropic documents for them; its server tools (web
search, web fetch, code execution, tool search, ...) and the client tools without a text schema (computer, memory)
left out of what the model sees and named in the dropped-tools header, as Responses' hosted tools are."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from hypnos.errors import clip, invalid_request
from hypnos.openai import FunctionDefinition, ToolDefinition

from hypnos_server.routes.chat_request import checked_tools
from hypnos_server.routes.responses_tools import DROPPED_HEADER

logger = logging.getLogger(__name__)

BASH = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The bash command to run."},
        "restart": {"type": "boolean", "description": "Restart the bash session instead of running a command."},
    },
}
TEXT_EDITOR = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "undo_edit"]},
        "path": {"type": "string", "description": "Absolute path of the file or directory."},
        "file_text": {"type": "string", "description": "The whole text of the file to create."},
        "old_str": {"type": "string", "description": "The exact text to replace (it must occur once)."},
        "new_str": {"type": "string", "description": "The text that replaces old_str, or the text to insert."},
        "insert_line": {"type": "integer", "description": "Insert new_str after this line (0: at the start)."},
        "view_range": {"type": "array", "items": {"type": "integer"}, "description": "[first, last] line to view."},
    },
    "required": ["command", "path"],
}
# Client tools by the start of their versioned type (bash_20250124, text_editor_20250728, ...): what the model sees
CLIENT_TOOLS = {
    "bash_": ("Run a command in a persistent bash shell and read its output.", BASH),
    "text_editor_": ("View, create and edit text files: view, create, str_replace, insert.", TEXT_EDITOR),
}
# Server tools Anthropic runs on its side, and client tools with no text schema: dropped
DROPPED_TYPES = (
    "web_search_",
    "web_fetch_",
    "code_execution_",
    "tool_search_tool_",
    "computer_",
    "memory_",
    "mcp_toolset",
)


@dataclass
class MessagesTools:
    """The functions the model sees and the typed tools dropped."""

    functions: list[ToolDefinition] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    def headers(self) -> dict[str, str]:
        """The dropped-tools header naming the typed tools left out (none: no header)."""
        return {DROPPED_HEADER: ",".join(dict.fromkeys(self.dropped))} if self.dropped else {}


def read_tools(tools: list[dict[str, Any]] | None) -> MessagesTools:
    """The MessagesTools of a request's `tools`; a tool of an unknown type or without a name is a 400 naming it."""
    found = MessagesTools()
    for index, tool in enumerate(tools or []):
        kind = tool.get("type") if isinstance(tool, dict) else None
        name = tool.get("name") if isinstance(tool, dict) else None
        if isinstance(kind, str) and kind.startswith(DROPPED_TYPES):
            found.dropped.append(kind)
            logger.debug("dropped the tool %s (%s): this server does not run it", clip(kind), clip(name))
            continue
        if not isinstance(name, str) or not name:
            raise invalid_request(f"Missing required field `tools[{index}].name`")
        typed = next((entry for prefix, entry in CLIENT_TOOLS.items() if str(kind).startswith(prefix)), None)
        if typed is not None:
            definition = FunctionDefinition(name=name, description=typed[0], parameters=typed[1])
        elif kind in (None, "custom"):
            schema = tool.get("input_schema")
            definition = FunctionDefinition(
                name=name, description=tool.get("description"), parameters=schema if isinstance(schema, dict) else None
            )
        else:
            raise invalid_request(f"Invalid value for `tools[{index}].type`: `{clip(kind)}`")
        found.functions.append(ToolDefinition(function=definition))
    found.functions = checked_tools(found.functions)
    return found
