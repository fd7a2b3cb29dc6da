"""Per-request chat decisions that depend on the model family: tools shown or hidden, a forced call, thinking."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypnos.chat import ChatInput
from hypnos.engine import ChatFinished, ContentDelta, ReasoningDelta, ToolCallEvent
from hypnos.errors import invalid_request

from hypnos_llama.formats import (
    OutputSplitter,
    ThinkingFormat,
    ToolCallFormat,
    detect_thinking_format,
    detect_tool_format,
)
from hypnos_llama.formats.call_arguments import ArgumentRules, argument_rules


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
    tool_names: frozenset[str] | None = None
    echoes: frozenset[tuple[str, str]] = frozenset()  # after a tool result: the calls it answers
    argument_rules: dict[str, ArgumentRules] = field(default_factory=dict)  # call_arguments
    template_variables: dict[str, Any] = field(default_factory=dict)

    def render_request(self, request: ChatInput) -> ChatInput:
        """The request as the template should see it (tools removed when tool_choice is none)."""
        if self.hide_tools and request.tools:
            from msgspec import structs

            return structs.replace(request, tools=[])
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
        splitter = OutputSplitter(
            self.tool_format,
            self.thinking,
            in_reasoning=in_reasoning,
            tool_names=self.tool_names,
            echoes=self.echoes,
            argument_rules=self.argument_rules,
        )
        if self.forced_prefix:
            splitter.feed(self.forced_prefix)
        return splitter


def plan_chat(
    chat_template: str | None, request: ChatInput, model_id: str = "", *, constrained: bool = False
) -> ChatPlan:
    """Decide tools and thinking for a request on a model whose GGUF carries `chat_template`.

    400 when the request asks for tools (tool_choice other than none) and the family has no tool format. A
    `constrained` answer (a response_format grammar) starts at once, without thinking.
    """
    from hypnos_llama.tool_grammar import answered_calls

    plan = ChatPlan(tool_names=frozenset(tool.function.name for tool in request.tools), echoes=answered_calls(request))
    if request.tools and request.tool_choice == "none":
        plan.hide_tools = True
    if request.wants_tools:
        plan.argument_rules = argument_rules(request.tools)
        plan.tool_format = detect_tool_format(chat_template)
        if plan.tool_format is None:
            raise invalid_request(
                f"the model `{model_id}` has no tool-calling format; send the request without tools "
                'or with tool_choice "none"'
            )
        if request.forced_tool is not None:
            plan.forced_prefix = plan.tool_format.forced_prefix(request.forced_tool)
        elif request.tool_choice == "required":
            plan.forced_prefix = plan.tool_format.forced_prefix(None)
        if plan.forced_prefix:  # the client asked for a call: one that repeats an answered call is still a call
            plan.echoes = frozenset()

    plan.thinking = detect_thinking_format(chat_template)
    if plan.thinking is not None:
        plan.thinking_on = request.thinking
        plan.thinking_budget = request.thinking_budget if plan.thinking_on else 0
        if plan.forced_prefix or constrained:
            # A forced call or a grammar starts the answer at once: no thinking before it.
            plan.thinking_on = False
            plan.thinking_budget = 0
        plan.template_variables["enable_thinking"] = plan.thinking_on
    return plan


class ChoiceReader:
    """The engine-side reading of one choice's events: the output split into text, thoughts and tool calls, the
    tokens' log probabilities kept with the answer text they made, finish_reason tool_calls when calls came."""

    def __init__(self, parser: OutputSplitter, index: int) -> None:
        self.parser = parser
        self.index = index
        self.logprobs: list[Any] = []
        self.called = False

    def read(self, event: Any) -> list[Any]:
        """The client-facing events one worker event makes."""
        if isinstance(event, ContentDelta):
            self.logprobs.extend(event.logprobs or [])
            return self._mark(self.parser.feed(event.text))
        if isinstance(event, ChatFinished):
            parsed = self._mark(self.parser.finish())
            if self.called and event.finish_reason == "stop":
                event.finish_reason = "tool_calls"
            return [*parsed, event]
        return [event]

    def _mark(self, events: list[Any]) -> list[Any]:
        for event in events:
            event.index = self.index
            if isinstance(event, ToolCallEvent):
                self.called = True
                self.logprobs = []
            elif isinstance(event, ContentDelta) and self.logprobs:
                event.logprobs, self.logprobs = self.logprobs, []
            elif isinstance(event, ReasoningDelta):
                self.logprobs = []
        return events


class ThinkingGuard:
    """Runs on the model's worker: counts the tokens a request thinks and closes the block at its budget.

    It reads the decoded text itself (a thinking block opened by the prompt or by the model, closed by the model
    or not), so the cut-off lands exactly at the budget whatever the event loop is doing.
    """

    def __init__(self, thinking: ThinkingFormat, budget: int, close_tokens: list[int], *, in_reasoning: bool) -> None:
        self.thinking = thinking
        self.budget = budget
        self.close_tokens = close_tokens
        self.in_reasoning = in_reasoning
        self.spent = 0
        self.done = False
        self._tail = ""

    def after_text(self, text: str) -> tuple[list[int], str] | None:
        """Given one accepted token's text: the tokens and text to insert now, or None."""
        if self.done:
            return None
        self._tail = (self._tail + text)[-4 * max(len(self.thinking.open), len(self.thinking.close)) :]
        if not self.in_reasoning:
            opened = self._tail.lstrip()
            if self.thinking.open in opened:
                self.in_reasoning = True
                self._tail = opened.split(self.thinking.open, 1)[1]
            elif not self.thinking.open.startswith(opened[: len(self.thinking.open)]):
                self.done = True  # the answer started without a thinking block
                return None
            else:
                return None
        if self.thinking.close in self._tail:
            self.done = True  # the model closed its block itself
            return None
        self.spent += 1
        if self.spent >= self.budget:
            self.done = True
            return self.close_tokens, self.thinking.close_text
        return None


def thinking_guard(plan: ChatPlan, prompt_text: str, tokenize: Any) -> ThinkingGuard | None:
    """The worker-side guard for a plan with a thinking budget (None when thinking is unbounded or absent)."""
    if plan.thinking is None or plan.thinking_budget is None:
        return None
    close = tokenize(plan.thinking.close_text)
    in_reasoning = prompt_text.rstrip().endswith(plan.thinking.open)
    return ThinkingGuard(plan.thinking, plan.thinking_budget, close, in_reasoning=in_reasoning)
