"""Prefill order: an agent's next turn (its conversation cached) arriving while another client's long prompt prefills.

`python -m bench prefill_order [--before CHECKOUT]` on the Qwen2.5-Coder-0.5B starter, in-process (2 slots, 2
threads unless `--threads`). An agent's `--turn`-token conversation is prefilled once (its slot keeps it); then a
fresh `--tokens`-token prompt starts in the other slot, and `--after-secs` into its prefill the agent's next turn
comes (the same conversation and one more short user message: a few new tokens). Reports the turn's time to its
first token and the long prompt's, each from its own submission. With `--before`, the same runs first in a child
process importing that checkout's sources (a git worktree), alternating `--rounds` times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LINE = "Line {i}: the keeper wrote that the lamp was trimmed, the glass was clean and the sea was calm tonight.\n"
SOURCES = ("core/src", "server/src", "plugins/hypnos-llama/src")


async def _first_token(engine: Any, request: Any) -> float:
    """Seconds from submission to the first generated event (the stream then runs to its end)."""
    from hypnos.engine import CancelToken, ChatAccepted

    started, first = time.perf_counter(), None
    async for event in engine.chat(request, CancelToken()):
        if first is None and not isinstance(event, ChatAccepted):
            first = time.perf_counter() - started
    return first if first is not None else float("nan")


async def one_round(gguf: Path, args: argparse.Namespace, round_: int) -> dict[str, float]:
    """One round on a fresh engine: the agent's next turn's TTFT and the long prompt's, in seconds."""
    import msgspec
    from hypnos_llama.testing import chat_request, make_engine, tier1

    engine = make_engine(gguf, slots=2, context_len=args.context, llama={"n_threads": args.threads})
    await engine.load(tier1(args.context, 64))
    try:
        history = f"Round {round_}: the agent's notes.\n" + "".join(LINE.format(i=i) for i in range(args.turn // 25))
        turn1 = msgspec.structs.replace(chat_request(history, temperature=0), max_tokens=4)
        await _first_token(engine, turn1)  # the agent's conversation, now cached in one slot
        turn2 = chat_request(history, "OK.", "Now say DONE.", temperature=0)
        turn2 = msgspec.structs.replace(turn2, max_tokens=4)
        body = "".join(LINE.format(i=i) for i in range(args.tokens // 25))
        cold = chat_request(f"Round {round_}, another client.\n{body}Say OK.", temperature=0)
        long = asyncio.ensure_future(_first_token(engine, msgspec.structs.replace(cold, max_tokens=2)))
        await asyncio.sleep(args.after_secs)
        turn = await _first_token(engine, turn2)
        return {"turn": turn, "long": await long}
    finally:
        await engine.unload()


def _child(args: argparse.Namespace) -> None:
    """Run the rounds here and print each as a JSON line (the parent reads them)."""
    from bench.llama_bench import _resolve_model

    gguf = _resolve_model(args.model)
    for round_ in range(args.rounds):
        print(json.dumps(asyncio.run(one_round(gguf, args, round_))), flush=True)


def _run(checkout: Path, argv: list[str]) -> list[dict[str, float]]:
    """The rounds measured with `checkout`'s sources first on the path, in a child process."""
    path = os.pathsep.join([*(str(checkout / s) for s in SOURCES), str(Path(__file__).resolve().parent.parent)])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-m", "bench.prefill_order_bench", "--child", *argv, "--rounds", "1"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    """Measure (each checkout alternately with --before) and print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="a GGUF (default: the Qwen2.5-Coder-0.5B starter)")
    parser.add_argument("--before", help="an old checkout (a git worktree) to compare with")
    parser.add_argument("--turn", type=int, default=2000, help="the agent's cached conversation, tokens (about)")
    parser.add_argument("--tokens", type=int, default=6000, help="the other client's long prompt, tokens (about)")
    parser.add_argument("--after-secs", type=float, default=3.0)
    parser.add_argument("--context", type=int, default=16384)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    if args.child:
        _child(args)
        return
    argv = [a for a in sys.argv[1:] if a not in ("--before", args.before)]
    argv = [a for i, a in enumerate(argv) if a != "--rounds" and (i == 0 or argv[i - 1] != "--rounds")]
    sides = {"after": Path(__file__).resolve().parent.parent}
    if args.before:
        sides = {"before": Path(args.before).resolve(), **sides}
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for round_ in range(args.rounds):
        for name in sides if round_ % 2 == 0 else reversed(list(sides)):
            (row,) = _run(sides[name], argv)
            rows[name].append(row)
            print(f"round {round_} {name}: turn {row['turn']:.2f} s, long prompt {row['long']:.2f} s", flush=True)
    print(f"\n| checkout | next turn TTFT s (median of {args.rounds}) | long prompt TTFT s |\n|---|---|---|")
    for name, found in rows.items():
        turn = statistics.median(r["turn"] for r in found)
        long = statistics.median(r["long"] for r in found)
        print(f"| {name} | {turn:.2f} | {long:.2f} |")


if __name__ == "__main__":
    main()
