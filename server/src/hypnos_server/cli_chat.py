"""`hypnos run <model> [prompt]`: a streamed chat in the terminal (history, multi-line input, /bye, /clear), or one
answer to a prompt given as words or on stdin."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from hypnos_server.cli_connect import ClientError, Target, add_connection_arguments, answer_of, target_of

HELP = """Commands:
  /clear   forget the conversation so far
  /bye     leave (or Ctrl-D)
  /?       this help
A line starting with \"\"\" opens a multi-line message; the line ending with \"\"\" closes it. Esc then Enter also
inserts a new line. Ctrl-C stops an answer being written.
"""
FENCE = '"""'


def register(commands: Any) -> None:
    """Add `hypnos run` to the parser."""
    run = commands.add_parser("run", help="chat with a model in the terminal, or answer one prompt (words or stdin)")
    run.add_argument("model")
    run.add_argument("prompt", nargs="*", help="answer this and exit (stdin, when piped, is appended)")
    run.add_argument("--system", help="a system message")
    run.add_argument("--max-tokens", type=int, help="the longest answer, in tokens")
    run.add_argument("--verbose", action="store_true", help="print the token counts and speed after each answer")
    add_connection_arguments(run)


def stream_answer(target: Target, body: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(kind, text) pieces of a streamed chat answer: "content", "reasoning", then one "usage" (JSON)."""
    with target.client(timeout=None) as client, client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code >= 400:
            response.read()
            answer_of(response)
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            chunk = json.loads(data)
            if chunk.get("error"):
                raise ClientError(f"the answer failed: {chunk['error'].get('message')}")
            for choice in chunk.get("choices", []):
                delta = choice.get("delta") or {}
                if delta.get("reasoning_content"):
                    yield "reasoning", delta["reasoning_content"]
                if delta.get("content"):
                    yield "content", delta["content"]
            if chunk.get("usage"):
                yield "usage", json.dumps(chunk["usage"])


def answer(target: Target, args: argparse.Namespace, messages: list[dict[str, str]], out: IO[str]) -> str:
    """Stream one answer to `out` (thoughts dimmed on a terminal); the answer's text."""
    body: dict[str, Any] = {"model": args.model, "messages": messages, "stream": True}
    body["stream_options"] = {"include_usage": True}
    if args.max_tokens:
        body["max_tokens"] = args.max_tokens
    started = time.perf_counter()
    text, thinking, usage = [], False, None
    tty = out.isatty()
    for kind, piece in stream_answer(target, body):
        if kind == "usage":
            usage = json.loads(piece)
            continue
        if kind == "reasoning":
            if tty:
                out.write(("\x1b[2m" if not thinking else "") + piece)
                thinking = True
            out.flush()
            continue
        if thinking:
            out.write("\x1b[0m\n")
            thinking = False
        text.append(piece)
        out.write(piece)
        out.flush()
    if thinking:
        out.write("\x1b[0m")
    out.write("\n")
    out.flush()
    if args.verbose and usage is not None:
        seconds = time.perf_counter() - started
        produced = usage.get("completion_tokens", 0)
        sys.stderr.write(
            f"prompt tokens: {usage.get('prompt_tokens')}, answer tokens: {produced}, "
            f"{produced / seconds if seconds else 0.0:.1f} tokens/s over {seconds:.2f} s\n"
        )
    return "".join(text)


def history_path() -> Path:
    """Where the typed lines are kept between sessions ($XDG_STATE_HOME/hypnos/history)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "hypnos" / "history"


def prompt_session() -> Any:
    """A prompt_toolkit session with a file history; Esc then Enter inserts a new line."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory, InMemoryHistory
    from prompt_toolkit.key_binding import KeyBindings

    bindings = KeyBindings()

    @bindings.add("escape", "enter")
    def _newline(event: Any) -> None:
        event.current_buffer.insert_text("\n")

    path = history_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        history: Any = FileHistory(str(path))
    except OSError:
        history = InMemoryHistory()
    return PromptSession(history=history, key_bindings=bindings)


def read_message(session: Any) -> str | None:
    """One message: a line, or the lines between two fences; None at end of input."""
    try:
        line = session.prompt(">>> ")
    except EOFError:
        return None
    if not line.lstrip().startswith(FENCE):
        return line
    lines = [line.lstrip()[len(FENCE) :]]
    while not lines[-1].rstrip().endswith(FENCE):
        try:
            lines.append(session.prompt("... "))
        except EOFError:
            break
    lines[-1] = lines[-1].rstrip().removesuffix(FENCE)
    return "\n".join(lines).strip("\n")


def chat_loop(target: Target, args: argparse.Namespace, session: Any, out: IO[str]) -> int:
    """The terminal chat: each message and answer joins the history sent with the next one."""
    system = [{"role": "system", "content": args.system}] if args.system else []
    messages = list(system)
    out.write(f"Chatting with {args.model} at {target.url}; /? for help, /bye to leave.\n")
    while True:
        try:
            text = read_message(session)
        except KeyboardInterrupt:
            continue
        if text is None or text.strip() == "/bye":
            return 0
        if not text.strip():
            continue
        if text.strip() == "/clear":
            messages = list(system)
            out.write("Cleared the conversation.\n")
            continue
        if text.strip() in ("/?", "/help"):
            out.write(HELP)
            continue
        if text.startswith("/") and " " not in text.strip():
            out.write(f"Unknown command {text.strip()}; /? lists them.\n")
            continue
        messages.append({"role": "user", "content": text})
        try:
            reply = answer(target, args, messages, out)
        except KeyboardInterrupt:
            out.write("\n(stopped)\n")
            messages.pop()
            continue
        except ClientError as error:
            out.write(f"error: {error}\n")
            messages.pop()
            continue
        messages.append({"role": "assistant", "content": reply})


def run_command(args: argparse.Namespace, session: Any = None) -> int:
    """One answer (prompt words and/or piped stdin), else the terminal chat."""
    target = target_of(args)
    target.need_server()
    target.get(f"/v1/models/{args.model}")  # 404 names an unknown model before anything is typed
    prompt = " ".join(args.prompt)
    if session is None and not sys.stdin.isatty():
        try:
            piped = sys.stdin.read()
        except (OSError, ValueError):  # stdin closed, or not readable (a test runner's)
            piped = ""
        prompt = f"{prompt}\n\n{piped}" if prompt and piped.strip() else (prompt or piped)
        if not prompt.strip():
            raise ClientError("nothing to answer: give a prompt, or pipe one in")
    if prompt:
        system = [{"role": "system", "content": args.system}] if args.system else []
        answer(target, args, [*system, {"role": "user", "content": prompt}], sys.stdout)
        return 0
    return chat_loop(target, args, session or prompt_session(), sys.stdout)
