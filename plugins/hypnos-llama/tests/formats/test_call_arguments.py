"""A parsed call's arguments cleaned against its schema: optional string arguments that restate their own description
(the 0.5B starter on Codex's exec_command) and keys a closed schema does not declare (its `content` for Claude Code's
Read) are left out; everything else the model wrote is kept."""

from __future__ import annotations

import json

from hypnos.engine import ToolCallEvent
from hypnos.openai import FunctionDefinition, ToolDefinition
from hypnos_llama.chat_plan import plan_chat
from hypnos_llama.testing import chat_request

QWEN = "{% if tools %}<tools></tools> <tool_call>{% endif %}<|im_start|>assistant\n"
JUSTIFICATION = "User-facing approval question for `require_escalated`; omit otherwise."
EXEC = FunctionDefinition(
    name="exec_command",
    parameters={
        "type": "object",
        "properties": {
            "cmd": {"type": "string", "description": "Shell command to execute."},
            "justification": {"type": "string", "description": JUSTIFICATION},
            "workdir": {"type": "string", "description": "Working directory for the command."},
            "tty": {"type": "boolean", "description": "True allocates a PTY for the command."},
        },
        "required": ["cmd"],
    },
)
# A required property keeps whatever the model wrote, its description included
NOTE = FunctionDefinition(
    name="note",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The text of the note to keep for later."}},
        "required": ["text"],
    },
)
READ = FunctionDefinition(
    name="Read",
    parameters={
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["file_path"],
        "additionalProperties": False,
    },
)
TOOLS = [ToolDefinition(function=EXEC), ToolDefinition(function=NOTE), ToolDefinition(function=READ)]


def _call(output: str) -> tuple[str, dict[str, object]]:
    plan = plan_chat(QWEN, chat_request("read hello.txt", max_tokens=8, tools=TOOLS))
    splitter = plan.output_parser("P")
    events = splitter.feed(output) + splitter.finish()
    calls = [event.call.function for event in events if isinstance(event, ToolCallEvent)]
    assert len(calls) == 1, events
    return calls[0].name, json.loads(calls[0].arguments)


def _tagged(name: str, arguments: dict[str, object]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def test_an_optional_argument_that_restates_its_description_is_left_out() -> None:
    whole = {"cmd": "cat hello.txt", "justification": JUSTIFICATION}
    assert _call(_tagged("exec_command", whole)) == ("exec_command", {"cmd": "cat hello.txt"})
    start = {"cmd": "cat hello.txt", "justification": "User-facing approval question for `require_escalated`"}
    assert _call(_tagged("exec_command", start)) == ("exec_command", {"cmd": "cat hello.txt"})
    more = {"cmd": "cat hello.txt", "justification": JUSTIFICATION + " The output token budget is 10000 tokens."}
    assert _call(_tagged("exec_command", more)) == ("exec_command", {"cmd": "cat hello.txt"})
    bare = json.dumps({"name": "exec_command", "arguments": {**whole, "tty": True}})
    assert _call(bare) == ("exec_command", {"cmd": "cat hello.txt", "tty": True})


def test_meant_arguments_are_kept() -> None:
    meant = {
        "cmd": "cat hello.txt",
        "justification": "Reading hello.txt needs the user's approval for require_escalated access",
        "workdir": "/tmp/work",
    }
    assert _call(_tagged("exec_command", meant)) == ("exec_command", meant)
    required = {"text": "The text of the note to keep for later."}
    assert _call(_tagged("note", required)) == ("note", required)


def test_keys_a_closed_schema_does_not_declare_are_left_out() -> None:
    written = {"file_path": "hello.txt", "content": "The content of hello.txt in the current directory.", "limit": 5}
    assert _call(_tagged("Read", written)) == ("Read", {"file_path": "hello.txt", "limit": 5})
    fenced = "```json\n" + json.dumps({"name": "Read", "arguments": written}, indent=2) + "\n```"
    assert _call(fenced) == ("Read", {"file_path": "hello.txt", "limit": 5})
    open_schema = {"cmd": "ls", "extra": 1}  # exec_command says nothing of other keys: they are the caller's
    assert _call(_tagged("exec_command", open_schema)) == ("exec_command", open_schema)
