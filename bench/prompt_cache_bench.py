"""Prompt cache: agent-like conversations beyond the slots, a restart and a swap, with the cache on and off.

`python -m bench prompt_cache` on the Qwen2.5-Coder-0.5B starter (4 slots). Two servers in turn, the same steps on
each, one with `[models.prompt_cache]` off and one with it on (defaults otherwise):

1. `--conversations` (8) conversations sharing a ~`--prefix-tokens` (3k) system-and-tools prefix, each with its own
   ~`--history-tokens` (1k) history, taken round robin for `--turns` (3) turns: each request's TTFT (the first
   content chunk of a stream), p50 over all and over the turns after the first;
2. a ~`--long-tokens` (6k) conversation, cold: its TTFT; then the model swapped out (tier 3) for another model (a
   tiny random GGUF) and back: the same prompt's TTFT; then the server restarted (same data_dir): the same prompt's
   TTFT again;
3. the peak resident set (VmHWM) of the engine host and the server's growth, against the RAM cap plus the model's
   booking.

Sizes can be scaled down on a loaded machine (the table says which were used). The two servers run one after the
other, not interleaved: the steps are stateful. Read the ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MODEL = "qwen2.5:0.5b"
OTHER = "tiny"
TOOL = "Tool {i}: `{name}` takes a JSON object with `path` (string), `mode` (one of read, write, append) and `limit` "
TOOL += "(integer, at most 500); it returns the file's lines with their numbers, or an error object.\n"


def prefix_text(tokens: int) -> str:
    """A system prompt with tool descriptions, about `tokens` tokens (about 40 a tool line)."""
    lines = ["You are a coding agent working in a repository. Use the tools below; answer briefly.\n"]
    lines += [TOOL.format(i=i, name=f"tool_{i}") for i in range(max(1, tokens // 40))]
    return "".join(lines)


def history_text(conversation: int, tokens: int) -> str:
    """A conversation's own opening message, about `tokens` tokens (about 20 a line)."""
    lines = [f"Task {conversation}: read these notes, then answer my questions in one word.\n"]
    lines += [f"Note {conversation}.{i}: file src/mod_{conversation}_{i}.py holds {i * 7 % 31} lines.\n"
              for i in range(max(1, tokens // 20))]  # fmt: skip
    return "".join(lines)


def stream_chat(base: str, model: str, messages: list[dict[str, str]], **fields: Any) -> tuple[float, str, int]:
    """One streamed chat (`fields` added to the body): (seconds to the first content chunk, the answer, cached
    prompt tokens)."""
    import httpx

    body = {"model": model, "messages": messages, "max_tokens": 12, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, **fields}  # fmt: skip
    started = time.perf_counter()
    first: float | None = None
    pieces: list[str] = []
    cached = 0
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=3600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    first = first or time.perf_counter()
                    pieces.append(text)
            usage = chunk.get("usage") or {}
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", cached)
    end = time.perf_counter()
    return (first or end) - started, "".join(pieces), cached


def hwm(pid: int) -> int:
    """A process's peak resident set in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def worker_of(host: int) -> int:
    """The server process holding the scheduler and the prompt cache store: the engine host's parent (granian's
    worker, not the process `hypnos serve` started)."""
    return int(Path(f"/proc/{host}/stat").read_text().rsplit(")", 1)[1].split()[1])


def rss(pid: int) -> int:
    """A process's resident set in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@contextlib.contextmanager
def serve(config: Path) -> Iterator[tuple[str, int]]:
    """A live server for the config: (base URL, its pid)."""
    from hypnos_server.testing import live_process

    with live_process(config, ready_timeout=600) as (process, base):
        yield base, process.pid


def run_side(work: Path, gguf: Path, tiny: Path, cached: bool, args: argparse.Namespace) -> dict[str, Any]:
    """Every step on one server configuration; the figures."""
    import httpx
    from hypnos_llama.testing import toml_model_config

    folder = work / ("on" if cached else "off")
    folder.mkdir()
    qwen = {"id": MODEL, "modality": "text_generation", "engine": "ggml_llama", "weights_path": str(gguf),
            "slots": 4, "context_len": args.context, "initial_tier": "tier1_gpu_vram",
            "prompt_cache": {"enabled": cached, "ram_bytes": args.ram_bytes}}  # fmt: skip
    other = {"id": OTHER, "modality": "text_generation", "engine": "ggml_llama", "weights_path": str(tiny)}
    config = folder / "hypnos.toml"
    config.write_text(toml_model_config(gguf.parent, [qwen, other]))
    prefix = prefix_text(args.prefix_tokens)
    chats = [[{"role": "system", "content": prefix}, {"role": "user", "content": history_text(c, args.history_tokens)}]
             for c in range(args.conversations)]  # fmt: skip
    out: dict[str, Any] = {"ttft": [], "later": [], "cached": []}
    long_chat = [{"role": "user", "content": history_text(99, args.long_tokens)}]
    with serve(config) as (base, _):
        first = httpx.get(f"{base}/v1/memory/status", timeout=30).json()
        host = next(m for m in first["models"] if m["id"] == MODEL)["engine_process"]["pid"]
        pid = worker_of(host)
        start_rss = rss(pid)
        for turn in range(args.turns):
            for chat in chats:
                seconds, answer, hit = stream_chat(base, MODEL, chat)
                out["ttft"].append(seconds)
                out["cached"].append(hit)
                if turn:
                    out["later"].append(seconds)
                chat += [{"role": "assistant", "content": answer}, {"role": "user", "content": f"And turn {turn + 2}?"}]
                print(f"  {'on' if cached else 'off'} turn {turn + 1}: TTFT {seconds:.2f} s, {hit} cached", flush=True)
        out["cold"], _, _ = stream_chat(base, MODEL, long_chat)
        tier = {"model": MODEL, "target_tier": "tier3_nvme_ssd"}
        httpx.post(f"{base}/v1/memory/tier", json=tier, timeout=600).raise_for_status()
        stream_chat(base, OTHER, [{"role": "user", "content": "hello"}])
        out["swap"], _, out["swap_cached"] = stream_chat(base, MODEL, long_chat)
        status = httpx.get(f"{base}/v1/memory/status", timeout=30).json()
        model = next(m for m in status["models"] if m["id"] == MODEL)
        host = (model.get("engine_process") or {}).get("pid")
        out["host_hwm"] = hwm(host) if host else 0  # a host started again at the swap counts from its start
        out["server_growth"] = hwm(pid) - start_rss
        out["booked"] = model["booked_bytes"]
        out["cache_ram"] = status["prompt_cache"]["ram_bytes"]
    with serve(config) as (base, pid):
        out["restart"], _, out["restart_cached"] = stream_chat(base, MODEL, long_chat)
    return out


def main() -> None:
    """Measure both sides and print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="a GGUF (default: the Qwen2.5-Coder-0.5B starter)")
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--prefix-tokens", type=int, default=3000)
    parser.add_argument("--history-tokens", type=int, default=1000)
    parser.add_argument("--long-tokens", type=int, default=6000)
    parser.add_argument("--context", type=int, default=8192, help="cells per slot")
    parser.add_argument("--ram-bytes", type=int, default=1 << 30, help="[models.prompt_cache] ram_bytes")
    args = parser.parse_args()

    from hypnos_llama.testing import write_tiny_llama

    from bench.llama_bench import _resolve_model

    gguf = _resolve_model(args.model)
    work = Path(tempfile.mkdtemp(prefix="hypnos-prompt-cache-bench-"))
    tiny = write_tiny_llama(work / "tiny.gguf")
    sides = {cached: run_side(work, gguf, tiny, cached, args) for cached in (False, True)}
    off, on = sides[False], sides[True]

    def row(name: str, a: float, b: float) -> None:
        print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.1f}x |")

    print(f"\n{args.conversations} conversations x {args.turns} turns, ~{args.prefix_tokens}-token shared prefix, "
          f"~{args.history_tokens}-token histories, 4 slots; ~{args.long_tokens}-token long conversation")  # fmt: skip
    print("| TTFT (s) | cache off | cache on | off / on |\n|---|---|---|---|")
    row("round robin, p50 of all turns", statistics.median(off["ttft"]), statistics.median(on["ttft"]))
    if args.turns > 1:
        row("round robin, p50 of turns 2+", statistics.median(off["later"]), statistics.median(on["later"]))
    row("long conversation, cold", off["cold"], on["cold"])
    row("the same prompt after a swap and back", off["swap"], on["swap"])
    row("the same prompt after a restart", off["restart"], on["restart"])
    swap, restart = on["cold"] / on["swap"], on["cold"] / on["restart"]
    print(f"cache on: after a swap {swap:.1f}x and after a restart {restart:.1f}x lower than its cold prefill "
          f"({on['swap_cached']} / {on['restart_cached']} tokens cached)")  # fmt: skip
    limit = args.ram_bytes + on["booked"]
    held = on["host_hwm"] + max(0, on["server_growth"])
    print(f"RSS, cache on: engine host peak {on['host_hwm'] / 2**20:.0f} MiB + server growth "
          f"{on['server_growth'] / 2**20:.0f} MiB = {held / 2**20:.0f} MiB against the RAM cap "
          f"{args.ram_bytes / 2**20:.0f} MiB + the model's booking {on['booked'] / 2**20:.0f} MiB = "
          f"{limit / 2**20:.0f} MiB: {'within' if held <= limit else 'OVER'}; cache RAM at the end "
          f"{on['cache_ram'] / 2**20:.0f} MiB (cache off: host {off['host_hwm'] / 2**20:.0f} MiB)")  # fmt: skip


if __name__ == "__main__":
    main()
