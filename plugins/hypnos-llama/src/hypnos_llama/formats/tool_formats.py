"""Tool-call formats per model family: how a call looks in the model's output, and how it is parsed.

Each family is a small table entry: the chat-template markers that identify it, the regions (open/close
delimiters) a call is written in, a parser for one region's text, and the prefix that forces a call.
A region that does not parse is given back as text, never an error.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParsedCall:
    """A call found in the output: function name and its arguments as a JSON string."""

    name: str
    arguments: str


@dataclass(frozen=True)
class Region:
    """Delimiters of a call region; close None means the region runs to the end of the output."""

    open: str
    close: str | None


def _json_arguments(value: Any) -> str | None:
    """Arguments as a JSON object string, or None when they are not an object."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if value is None:
        value = {}
    if not isinstance(value, dict):
        return None
    return json.dumps(value, ensure_ascii=False)


# Keys a call object may hold besides its arguments: an object with any other key is data that has a "name" field
# (an answer under a response_format schema such as {"name": ..., "country": ...}), not a call
CALL_KEYS = frozenset({"name", "type", "id"})


def _calls_from_json(payload: Any, arguments_keys: tuple[str, ...] = ("arguments", "parameters")) -> list[ParsedCall]:
    """Calls from decoded JSON: one {"name", "arguments"} object or a list of them."""
    items = payload if isinstance(payload, list) else [payload]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return []
        if not item.keys() <= CALL_KEYS.union(arguments_keys):
            return []
        raw: Any = next((item[key] for key in arguments_keys if key in item), {})
        arguments = _json_arguments(raw)
        if arguments is None:
            return []
        calls.append(ParsedCall(item["name"], arguments))
    return calls


def _loads(text: str) -> Any:
    try:
        return json.loads(text.strip())
    except ValueError:
        return None


def _scalar(text: str) -> Any:
    """A parameter value written as text: JSON when it parses, else the trimmed string."""
    stripped = text.strip()
    try:
        return json.loads(stripped)
    except ValueError:
        return stripped


# A call written as bare JSON at the start of the answer (no region markers): the region runs to the end of the output
BARE = Region("", None)
# How a bare JSON call starts, whitespace removed: `{"name":` or a list of calls
BARE_STARTS = ('{"name":', '[{"name":')


def canonical(arguments: str) -> str:
    """Call arguments as sorted compact JSON (the text itself when it is not JSON)."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return arguments


# A code fence's info string (```json, ```markdown, ...): the small models wrap a call they mean in one of these.
# The same text is a Python regex and a GBNF rule (the call grammar and its trigger use it too).
FENCE_TAG_CHARS = 20
FENCE_TAG = f"[A-Za-z0-9_+.-]{{0,{FENCE_TAG_CHARS}}}"
_FENCE_TAG = re.compile(FENCE_TAG)


def fence_end(text: str) -> int | None:
    """Where a code fence that opens `text` (leading whitespace removed) ends its info string: 0 when `text` opens
    no fence, None while it may still be opening one."""
    if not text.startswith("```"):
        return None if "```".startswith(text) and text else 0
    tag = _FENCE_TAG.match(text, 3)
    assert tag is not None
    return None if tag.end() == len(text) and tag.end() - 3 < FENCE_TAG_CHARS else tag.end()


def bare_start(text: str) -> bool | None:
    """Whether an answer's first text is a bare JSON call, alone or in a code fence of any info string: True,
    False, or None while it may still become one."""
    stripped = text.lstrip()
    end = fence_end(stripped)
    if end is None:
        return None
    compact = "".join(stripped[end:].split())
    if any(compact.startswith(start) for start in BARE_STARTS):
        return True
    if any(start.startswith(compact) for start in BARE_STARTS):
        return None
    return False


def name_spellings(name: str, names: Iterable[str]) -> list[str]:
    """The spellings of a declared function's name a call may use: the name, and when no other declared name differs
    from it only in letter case, its all-lower-case form and its first letter's other case (small models write
    Claude Code's `Read` for opencode's `read`: Kilo Code's run on the 0.5B starter)."""
    if sum(1 for other in names if other.lower() == name.lower()) > 1:
        return [name]
    variants = (name.lower(), name[:1].upper() + name[1:], name[:1].lower() + name[1:])
    return [name, *sorted({variant for variant in variants if variant != name})]


# What a small model adds to a declared name it means: a separator and a word or a few, a word perhaps a file name
# (the 0.5B starter writes `read-file`, `read_file` and `read-hello.txt` for Claude Code's `Read`). The same text is a
# Python regex and a GBNF rule.
NAME_TAIL = "[_-][A-Za-z0-9][A-Za-z0-9.]{0,23}([_-][A-Za-z0-9][A-Za-z0-9.]{0,23}){0,3}"
_NAME_TAIL = re.compile(NAME_TAIL)


def takes_tail(name: str, names: Iterable[str]) -> bool:
    """Whether a call may write a declared `name` with a tail (NAME_TAIL) and mean that function: when no other
    declared name begins with it and a separator (letter case aside), so the tail cannot be another's name."""
    low = name.lower()
    return not any(other.lower() != low and other.lower()[: len(low) + 1] in (low + "_", low + "-") for other in names)


def declared_name(name: str, names: Iterable[str]) -> str | None:
    """The declared function a call's name means: the same name, else the one it spells (`name_spellings`), else
    the one it writes with a tail (`takes_tail`)."""
    names = list(names)
    if name in names:
        return name
    spelled = next((declared for declared in names if name in name_spellings(declared, names)), None)
    if spelled is not None:
        return spelled
    for declared in names:
        if takes_tail(declared, names):
            for spelling in name_spellings(declared, names):
                if name.startswith(spelling) and _NAME_TAIL.fullmatch(name, len(spelling)):
                    return declared
    return None


def bare_calls(text: str) -> tuple[list[ParsedCall], str]:
    """The calls of a bare JSON answer (one call or a list, in a code fence or not) and the text after its JSON and
    the fence's close ([] when it is not one)."""
    stripped = text.lstrip()
    end = fence_end(stripped) or 0
    body = stripped[end:].lstrip()
    try:
        value, stop = json.JSONDecoder().raw_decode(body)
    except ValueError:
        return [], text
    rest = body[stop:]
    if end and rest.lstrip().startswith("```"):
        rest = rest.lstrip()[3:]
    return _calls_from_json(value), rest


class ToolCallFormat:
    """One family's tool-call format."""

    name = "base"
    template_markers: tuple[str, ...] = ()
    regions: tuple[Region, ...] = ()

    def parse_region(self, region: Region, inner: str) -> list[ParsedCall]:
        """The calls in one region's inner text ([] when it does not parse)."""
        raise NotImplementedError

    def forced_prefix(self, function_name: str | None) -> str:
        """Text the answer is started with to force a call (of `function_name` when given)."""
        return self.regions[0].open


class HermesFormat(ToolCallFormat):
    """Qwen 2.5 / Qwen 3 (Hermes style): <tool_call>{"name": ..., "arguments": {...}}</tool_call>.

    The small Qwen models often write the call in a ```json code block, or as bare JSON; both are accepted too.
    """

    name = "hermes"
    template_markers = ("<tool_call>",)
    regions = (Region("<tool_call>", "</tool_call>"), Region("```json", "```"))

    def parse_region(self, region: Region, inner: str) -> list[ParsedCall]:
        return _calls_from_json(_loads(inner))

    def forced_prefix(self, function_name: str | None) -> str:
        if function_name:
            return '<tool_call>\n{"name": ' + json.dumps(function_name) + ', "arguments": '
        # Small models stop right after a bare <tool_call>; opening the name makes them write the call.
        return '<tool_call>\n{"name": "'


class Qwen3CoderFormat(ToolCallFormat):
    """Qwen3-Coder / Qwen 3.5+: <tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>."""

    name = "qwen3_coder"
    template_markers = ("<tool_call>", "<function=")
    regions = (Region("<tool_call>", "</tool_call>"),)
    _function = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", re.S)
    _parameter = re.compile(r"<parameter=([^>\s]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.S)

    def parse_region(self, region: Region, inner: str) -> list[ParsedCall]:
        calls = []
        for name, body in self._function.findall(inner):
            arguments = {key: _scalar(value) for key, value in self._parameter.findall(body)}
            calls.append(ParsedCall(name, json.dumps(arguments, ensure_ascii=False)))
        return calls

    def forced_prefix(self, function_name: str | None) -> str:
        return f"<tool_call>\n<function={function_name}>\n" if function_name else "<tool_call>\n<function="


class GlmFormat(ToolCallFormat):
    """GLM-4.5 / 4.7: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>."""

    name = "glm"
    template_markers = ("<arg_key>",)
    regions = (Region("<tool_call>", "</tool_call>"),)
    _pair = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)

    def parse_region(self, region: Region, inner: str) -> list[ParsedCall]:
        name = inner.split("<arg_key>", 1)[0].strip()
        if not name or any(c in name for c in "<>{}\n"):
            return []
        arguments = {key.strip(): _scalar(value) for key, value in self._pair.findall(inner)}
        return [ParsedCall(name, json.dumps(arguments, ensure_ascii=False))]

    def forced_prefix(self, function_name: str | None) -> str:
        return f"<tool_call>{function_name}\n" if function_name else "<tool_call>"


class LfmFormat(ToolCallFormat):
    """LFM2 / LFM3 (Liquid): <|tool_call_start|>[name(arg="v", n=1)]<|tool_call_end|>, Python call syntax."""

    name = "lfm"
    template_markers = ("<|tool_call_start|>",)
    regions = (Region("<|tool_call_start|>", "<|tool_call_end|>"),)

    def parse_region(self, region: Region, inner: str) -> list[ParsedCall]:
        try:
            tree = ast.parse(inner.strip(), mode="eval").body
        except SyntaxError:
            return []
        nodes = tree.elts if isinstance(tree, ast.List) else [tree]
        calls = []
        for node in nodes:
            if not isinstance(node, ast.Call) or node.args:
                return []
            name = ast.unparse(node.func)
            try:
                arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
            except ValueError:
                return []
            calls.append(ParsedCall(name, json.dumps(arguments, ensure_ascii=False)))
        return calls

    def forced_prefix(self, function_name: str | None) -> str:
        return f"<|tool_call_start|>[{function_name}(" if function_name else "<|tool_call_start|>["


class NemotronFormat(ToolCallFormat):
    """NVIDIA Nemotron: <TOOLCALL>[{"name": ..., "arguments": {...}}]</TOOLCALL>."""

    name = "nemotron"
    template_markers = ("<TOOLCALL>",)
    regions = (Region("<TOOLCALL>", "</TOOLCALL>"),)

    def parse_region(self, region: Region, inner: str) -> list[ParsedCall]:
        return _calls_from_json(_loads(inner))

    def forced_prefix(self, function_name: str | None) -> str:
        return f'<TOOLCALL>[{{"name": {json.dumps(function_name)}, "arguments": ' if function_name else "<TOOLCALL>["


class MistralFormat(ToolCallFormat):
    """Mistral: [TOOL_CALLS][{"name": ..., "arguments": {...}}] or [TOOL_CALLS]name[ARGS]{...}."""

    name = "mistral"
    template_markers = ("[TOOL_CALLS]",)
    regions = (Region("[TOOL_CALLS]", None),)
    _named = re.compile(r"([A-Za-z0-9_.\-]+)\[ARGS\]")

    def parse_region(self, region: Region, inner: str) -> list[ParsedCall]:
        payload = _loads(inner)
        if payload is not None:
            return _calls_from_json(payload)
        calls = []
        decoder = json.JSONDecoder()
        for part in (p.strip() for p in inner.split("[TOOL_CALLS]")):
            match = self._named.match(part)
            if not match:
                return []
            try:
                value, _ = decoder.raw_decode(part[match.end() :])
            except ValueError:
                return []
            arguments = _json_arguments(value)
            if arguments is None:
                return []
            calls.append(ParsedCall(match.group(1), arguments))
        return calls

    def forced_prefix(self, function_name: str | None) -> str:
        return f"[TOOL_CALLS]{function_name}[ARGS]" if function_name else "[TOOL_CALLS]"


class FunctionGemmaFormat(ToolCallFormat):
    """Gemma function calling: <start_function_call>call:NAME{key:<escape>text<escape>,n:1}<end_function_call>."""

    name = "gemma"
    template_markers = ("<start_function_call>",)
    regions = (Region("<start_function_call>", "<end_function_call>"),)
    _pair = re.compile(r"\s*([A-Za-z0-9_\-]+)\s*:\s*(<escape>(.*?)<escape>|[^,}]*)\s*,?", re.S)

    def parse_region(self, region: Region, inner: str) -> list[ParsedCall]:
        text = inner.strip()
        if not text.startswith("call:") or "{" not in text or not text.endswith("}"):
            return []
        name, _, body = text[len("call:") :].partition("{")
        body = body[:-1]
        arguments: dict[str, Any] = {}
        position = 0
        while position < len(body):
            match = self._pair.match(body, position)
            if not match or match.end() == position:
                return []
            key, raw, escaped = match.group(1), match.group(2), match.group(3)
            arguments[key] = escaped if escaped is not None else _scalar(raw)
            position = match.end()
        return [ParsedCall(name.strip(), json.dumps(arguments, ensure_ascii=False))]

    def forced_prefix(self, function_name: str | None) -> str:
        return f"<start_function_call>call:{function_name}{{" if function_name else "<start_function_call>call:"


class Llama3Format(ToolCallFormat):
    """Llama 3.x: <|python_tag|>{"name": ..., "parameters": {...}} (several joined by ';')."""

    name = "llama3"
    template_markers = ("<|python_tag|>",)
    regions = (Region("<|python_tag|>", None),)

    def parse_region(self, region: Region, inner: str) -> list[ParsedCall]:
        calls: list[ParsedCall] = []
        for part in (p for p in inner.split(";") if p.strip()):
            found = _calls_from_json(_loads(part))
            if not found:
                return []
            calls.extend(found)
        return calls

    def forced_prefix(self, function_name: str | None) -> str:
        return (
            f'<|python_tag|>{{"name": {json.dumps(function_name)}, "parameters": '
            if function_name
            else "<|python_tag|>"
        )


# Most specific first: Qwen3-Coder and GLM templates also contain <tool_call>.
FAMILIES: tuple[ToolCallFormat, ...] = (
    Qwen3CoderFormat(),
    GlmFormat(),
    HermesFormat(),
    LfmFormat(),
    NemotronFormat(),
    MistralFormat(),
    FunctionGemmaFormat(),
    Llama3Format(),
)


def detect_tool_format(chat_template: str | None) -> ToolCallFormat | None:
    """The tool-call format a GGUF's chat template uses, or None when it has no known one."""
    if not chat_template:
        return None
    for family in FAMILIES:
        if all(marker in chat_template for marker in family.template_markers):
            return family
    return None
