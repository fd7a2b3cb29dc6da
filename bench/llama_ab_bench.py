"""Before/after for the llama chat path: two Hypnos checkouts serve the same GGUF, measured round by round alternately.

`python -m bench llama_ab --before /path/to/old/checkout [--after /path/to/new/checkout]` (default after: this
checkout). Each server runs with PYTHONPATH set to its checkout's `core/src`, `server/src` and
`plugins/hypnos-llama/src`, in this interpreter (same llama-cpp-python build, threads and settings). Rounds alternate
which server goes first, so a busy machine slows both alike. Prints the medians of one stream's decode tok/s and TTFT
and of four concurrent streams' aggregate tok/s, with after / before.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hypnos_server.testing import stop_process

from bench.llama_bench import PROMPTS_4, _aggregate, _hypnos_command, _resolve_model, _row, _single, _wait_ready

SOURCES = ("core/src", "server/src", "plugins/hypnos-llama/src")


@contextlib.contextmanager
def _server(checkout: Path, work: Path, gguf: Path, port: int, threads: int, n_ctx: int) -> Iterator[str]:
    """A Hypnos server importing the given checkout's sources."""
    command = _hypnos_command(work, gguf, port, threads, n_ctx, {})
    path = os.pathsep.join(str(checkout / s) for s in SOURCES)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
    url = f"http://127.0.0.1:{port}"
    with (work / f"server-{port}.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            _wait_ready(url, "/v1/models", process)
            yield url
        finally:
            stop_process(process)


def main() -> None:
    """Measure both checkouts alternately and print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="the old checkout (a git worktree)")
    parser.add_argument("--after", default=str(Path(__file__).resolve().parent.parent), help="the new checkout")
    parser.add_argument("--model", help="a GGUF (default: the Qwen2.5-Coder-0.5B starter)")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--n-ctx", type=int, default=2048)
    args = parser.parse_args()
    gguf = _resolve_model(args.model)
    checkouts = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    rows: dict[str, dict[str, list[float]]] = {name: {"tps": [], "ttft": [], "agg": []} for name in checkouts}
    with tempfile.TemporaryDirectory(prefix="hypnos-llama-ab-") as tmp, contextlib.ExitStack() as stack:
        urls = {
            name: stack.enter_context(_server(path, Path(tmp), gguf, 18761 + i, args.threads, args.n_ctx))
            for i, (name, path) in enumerate(checkouts.items())
        }
        for url in urls.values():  # warm both (first-request costs, page cache)
            asyncio.run(_single(url, "bench", 8))
        for round_ in range(args.rounds):
            order = list(urls) if round_ % 2 == 0 else list(reversed(urls))
            for name in order:
                one = asyncio.run(_single(urls[name], "bench", args.max_tokens))
                rows[name]["tps"].append(one.decode_tps)
                rows[name]["ttft"].append(one.ttft_ms)
            for name in order:
                rows[name]["agg"].append(asyncio.run(_aggregate(urls[name], "bench", PROMPTS_4, args.max_tokens)))
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    med = {name: {k: statistics.median(v) for k, v in r.items()} for name, r in rows.items()}
    print(f"\n{gguf.name}, {args.threads} threads, {args.max_tokens} greedy tokens, {args.rounds} rounds (medians)")
    print(f"before {checkouts['before']}\nafter  {checkouts['after']}\n")
    print(_row("", [], "") + "".join(h.rjust(14) for h in ("before", "after", "after/before")))
    for key, label in (("tps", "decode tok/s (1 stream)"), ("ttft", "TTFT ms (1 stream)"), ("agg", "tok/s, 4 streams")):
        before, after = med["before"][key], med["after"][key]
        print(_row(label, [before, after, after / before], ".2f"))


if __name__ == "__main__":
    main()
