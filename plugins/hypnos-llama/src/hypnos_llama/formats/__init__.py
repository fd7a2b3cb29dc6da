"""Per-family output formats: tool calls and thinking blocks, detected from the GGUF's chat template."""

from hypnos_llama.formats.splitter import OutputSplitter
from hypnos_llama.formats.thinking import ThinkingFormat, detect_thinking_format
from hypnos_llama.formats.tool_formats import ParsedCall, ToolCallFormat, detect_tool_format

__all__ = [
    "OutputSplitter",
    "ParsedCall",
    "ThinkingFormat",
    "ToolCallFormat",
    "detect_thinking_format",
    "detect_tool_format",
]
