"""Per-request chat decisions that depend on the model family: tools shown or hidden, a forced call, thinking."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypnos.engine import ChatOptions
from hypnos.errors import invalid_request
from hypnos.openai import ChatCompletionRequest

from hypnos_llama.formats import (
    OutputSplitter,
    ThinkingFormat,
    ToolCallFormat,
    detect_thinking_format,
    detect_tool_format,
)
from hypnos_llama.slots import ChatJob


@dataclass
class ChatPlan:
    """How one request is rendered and how its output is read back."""

    tool_format: ToolCallFormat | None = None
    thinking: ThinkingFormat | None = None
    thinking_on: bool = False
    # Thinking tokens allowed before the server closes the block (None: unbounded; 0: close at once).
    thinking_budget: int | None = None
    forced_prefix: str = ""
    hide_tools: bool = False
    template_variables: dict[str, Any] = field(default_factory=dict)

    def render_request(self, request: ChatCompletionRequest) -> ChatCompletionRequest:
        """The request as the template should see it (tools removed when tool_choice is none)."""
        if self.hide_tools and request.tools:
            from msgspec import structs

            return structs.replace(request, tools=None)
        return request

    def finish_prompt(self, rendered: str) -> str:
        """The rendered prompt, a thinking block the template opened closed at once when the budget is 0, and the
        forced call prefix when a call is forced."""
        if self.thinking and self.thinking_budget == 0 and rendered.rstrip().endswith(self.thinking.open):
            rendered += self.thinking.close_text
        return rendered + self.forced_prefix

    def output_parser(self, prompt: str) -> OutputSplitter:
        """A splitter for this request's output; a forced prefix counts as already generated."""
        in_reasoning = bool(self.thinking and prompt.rstrip().endswith(self.thinking.open))
        splitter = OutputSplitter(self.tool_format, self.thinking, in_reasoning=in_reasoning)
        if self.forced_prefix:
            splitter.feed(self.forced_prefix)
        return splitter


def plan_chat(chat_template: str | None, request: ChatCompletionRequest, options: ChatOptions) -> ChatPlan:
    """Decide tools and thinking for a request on a model whose GGUF carries `chat_template`.

    400 when the request asks for tools (tool_choice other than none) and the family has no tool format.
    """
    plan = ChatPlan()
    choice = request.tool_choice
    wants_tools = bool(request.tools) and choice != "none"
    if request.tools and choice == "none":
        plan.hide_tools = True
    if wants_tools:
        plan.tool_format = detect_tool_format(chat_template)
        if plan.tool_format is None:
            raise invalid_request(
                f"the model `{request.model}` has no tool-calling format; send the request without tools "
                "or with tool_choice \"none\""
            )
        if choice == "required":
            plan.forced_prefix = plan.tool_format.forced_prefix(None)
        elif choice is not None and not isinstance(choice, str):
            plan.forced_prefix = plan.tool_format.forced_prefix(choice.function.name)

    plan.thinking = detect_thinking_format(chat_template)
    if plan.thinking is not None:
        effort = (request.reasoning_effort or "").strip().lower()
        plan.thinking_on = options.thinking and effort != "none"
        if effort == "none" or not plan.thinking_on:
            plan.thinking_budget = 0
        else:
            plan.thinking_budget = options.thinking_budget
        if plan.forced_prefix:
            # A forced call starts the answer at once: no thinking before it.
            plan.thinking_on = False
            plan.thinking_budget = 0
        plan.template_variables["enable_thinking"] = plan.thinking_on
    return plan


class ThinkingBudget:
    """Counts the pieces a request thinks and, once its budget is spent, has the worker close the block."""

    def __init__(self, plan: ChatPlan, job: ChatJob, model: Any) -> None:
        self.plan = plan
        self.job = job
        self.model = model
        self.spent = 0
        self.closed = False

    def after_piece(self, parser: OutputSplitter) -> None:
        """Call after each generated piece was fed to the parser."""
        thinking, budget = self.plan.thinking, self.plan.thinking_budget
        if self.closed or thinking is None or budget is None or not parser.in_reasoning:
            return
        self.spent += 1
        if self.spent > budget:
            close = thinking.close_text
            self.job.inject(self.model.tokenize(close, add_special=False, parse_special=True), close)
            self.closed = True
