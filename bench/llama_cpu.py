"""Where a streamed answer's CPU goes: per-thread CPU ms per token of Hypnos, its HTTP client, and in-process.

Run from the repo root: `python -m bench.llama_cpu` (the llama_bench environment). One Hypnos server (like-for-like
settings as llama_bench) streams `--streams` greedy answers of `--max-tokens` tokens, one at a time; the run time of
every thread of the server's processes (granian's main and its worker) and of this client process comes from
`/proc/<pid>/task/<tid>/schedstat` (nanoseconds) before and after, with the involuntary context switches (a compute
thread preempted by someone else). Then the same answers stream from an in-process llama-cpp-python `Llama` and
this process's threads are counted the same way. Thread names come from `py-spy dump` when py-spy is installed (the
Python threads; the rest are llama.cpp's OpenMP workers or granian's own), else from /proc comm.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.llama_bench import (
    PROMPT,
    PROMPTS_4,
    _aggregate,
    _hypnos_command,
    _inprocess_stream,
    _process,
    _resolve_model,
    _single,
    fresh_prompt,
    in_process_llama,
    like_for_like,
)

TTFT_PARTS = ("queue_ms", "prefill_ms", "ttft_ms")  # the engine's: arrival -> slot, slot -> first token, both


@dataclass
class ThreadTime:
    """One thread's counters at one moment."""

    name: str
    run_ns: int
    preempted: int  # involuntary context switches


def process_tree(pid: int) -> list[int]:
    """The pid and its descendants (granian's worker is a child of the server's main process)."""
    found = [pid]
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        found += process_tree(int(child))
    return found


def thread_times(pids: list[int], names: dict[int, str]) -> dict[int, ThreadTime]:
    """Every thread of `pids`: run time (schedstat) and involuntary switches."""
    result: dict[int, ThreadTime] = {}
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            tid = int(task.name)
            try:
                run_ns = int((task / "schedstat").read_text().split()[0])
                status = (task / "status").read_text()
                comm = (task / "comm").read_text().strip()
            except (FileNotFoundError, ProcessLookupError):
                continue
            preempted = int(re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
            result[tid] = ThreadTime(f"{pid}/{names.get(tid, comm)}", run_ns, preempted)
    return result


def python_thread_names(pid: int) -> dict[int, str]:
    """tid -> Python thread name from `py-spy dump` (empty without py-spy)."""
    spy = shutil.which("py-spy")
    if spy is None:
        return {}
    try:
        out = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"Thread (\d+) \(\w+\): \"([^\"]*)\"", out)}


def delta(before: dict[int, ThreadTime], after: dict[int, ThreadTime], tokens: int) -> list[tuple[str, float, float]]:
    """(thread, CPU ms per token, preemptions per token), busiest first, threads with >= 0.001 ms/token."""
    rows = []
    for tid, end in after.items():
        start = before.get(tid, ThreadTime(end.name, 0, 0))
        ms = (end.run_ns - start.run_ns) / 1e6 / tokens
        if ms >= 0.001:
            rows.append((f"{end.name} [{tid}]", ms, (end.preempted - start.preempted) / tokens))
    return sorted(rows, key=lambda row: -row[1])


def print_table(title: str, rows: list[tuple[str, float, float]], wall_ms: float) -> None:
    """One block of the report."""
    print(f"\n{title}: wall {wall_ms:.2f} ms/token")
    print(f"  {'thread':<44}{'CPU ms/token':>14}{'preempted/token':>17}")
    for name, ms, preempted in rows:
        print(f"  {name:<44}{ms:>14.3f}{preempted:>17.2f}")
    print(f"  {'total':<44}{sum(r[1] for r in rows):>14.3f}")


def main() -> None:
    """Stream from Hypnos and in-process, count every thread's CPU, print ms per token."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="a GGUF (default: the Qwen2.5-Coder-0.5B starter)")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--streams", type=int, default=5)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a [models.llama] option")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="the server's environment")
    parser.add_argument(
        "--fill-slots", action="store_true", help="first stream the 4 prompts together (as llama_bench's rounds do)"
    )
    parser.add_argument("--no-inprocess", action="store_true", help="measure Hypnos only")
    parser.add_argument("--spy", metavar="FILE", help="also record the server's Python threads with py-spy (raw)")
    args = parser.parse_args()
    from hypnos_server.testing import free_port

    gguf = _resolve_model(args.model)
    work = Path(tempfile.mkdtemp(prefix="hypnos-llama-cpu-"))
    same = like_for_like(args.set)
    for item in args.env:
        key, _, value = item.partition("=")
        os.environ[key] = value
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    me = os.getpid()
    command = _hypnos_command(work, gguf, port, args.threads, args.n_ctx, same)
    with _process(command, url, "/ready", work / "hypnos.log"):
        server = [p for p in _children_of_me() if p != me]
        asyncio.run(_single(url, "bench", 8))
        if args.fill_slots:  # the other slots then hold cached prompts, as in llama_bench after its first round
            asyncio.run(_aggregate(url, "bench", PROMPTS_4, args.max_tokens))
        names: dict[int, str] = {}
        worker = server[-1]
        for pid in server:
            found = python_thread_names(pid)
            names.update(found)
            if any(name.startswith("llama-batch") for name in found.values()):
                worker = pid
        spy = _start_spy(args.spy, worker)
        names.update({t.native_id: t.name for t in threading.enumerate() if t.native_id})
        results = []
        before = thread_times([*server, me], names)
        started = time.perf_counter()
        for _ in range(args.streams):
            results.append(asyncio.run(_single(url, "bench", args.max_tokens)))
        wall = time.perf_counter() - started
        after = thread_times([*server, me], names)
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            spy.wait(timeout=30)
        new = [asyncio.run(_single(url, "bench", 4, prompt=fresh_prompt(100 + i))) for i in range(args.streams)]
    tokens = sum(r.tokens for r in results)
    decode = statistics.median(r.decode_tps for r in results)
    title = f"Hypnos ({decode:.2f} tok/s decode, {tokens} tokens)"
    print_table(title, delta(before, after, tokens), wall * 1000 / tokens)
    if args.no_inprocess:
        _ttft_report(results, new, None, None)
        return
    llm = in_process_llama(gguf, args.threads, args.n_ctx)
    _inprocess_stream(llm, PROMPT, 8)
    names.update({t.native_id: t.name for t in threading.enumerate() if t.native_id})
    inproc = []
    before = thread_times([me], names)
    started = time.perf_counter()
    for _ in range(args.streams):
        inproc.append(_inprocess_stream(llm, PROMPT, args.max_tokens))
    wall = time.perf_counter() - started
    after = thread_times([me], names)
    tokens = sum(r.tokens for r in inproc)
    decode = statistics.median(r.decode_tps for r in inproc)
    print_table(f"in-process ({decode:.2f} tok/s decode)", delta(before, after, tokens), wall * 1000 / tokens)
    inproc_new = [_inprocess_stream(llm, fresh_prompt(200 + i), 4) for i in range(args.streams)]
    _ttft_report(results, new, inproc, inproc_new)
    print(f"\n(the client is this process, pid {me}; load: {os.getloadavg()[0]:.2f}; logs: {work})")


def _ttft_report(repeated: list[Any], new: list[Any], inproc: list[Any] | None, inproc_new: list[Any] | None) -> None:
    """Client TTFT split into the engine's parts and what lies around the engine (HTTP, the server, the client)."""
    print("\nTTFT ms, medians (engine: hypnos_telemetry.engine; around: client TTFT - engine ttft_ms)")
    for label, hypnos, local in (("repeated prompt", repeated, inproc), ("new prompt", new, inproc_new)):
        parts = {key: statistics.median(r.engine[key] for r in hypnos if r.engine) for key in TTFT_PARTS}
        around = statistics.median(r.ttft_ms - r.engine["ttft_ms"] for r in hypnos if r.engine)
        client = statistics.median(r.ttft_ms for r in hypnos)
        shown = ", ".join(f"{key} {value:.1f}" for key, value in parts.items())
        alone = "" if local is None else f"; in-process {statistics.median(r.ttft_ms for r in local):.1f}"
        print(f"  {label:<16} hypnos {client:.1f} ({shown}, around {around:.1f}){alone}")
    print(f"(load {os.getloadavg()[0]:.2f})")


def _start_spy(out: str | None, pid: int) -> subprocess.Popen[bytes] | None:
    """py-spy recording `pid`'s threads without pausing it (raw folded stacks, idle frames left out)."""
    spy = shutil.which("py-spy")
    if out is None or spy is None:
        return None
    command = [spy, "record", "--pid", str(pid), "--rate", "250", "--format", "raw", "--threads", "--nonblocking"]
    process = subprocess.Popen([*command, "--output", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the streams start
    return process


def _children_of_me() -> list[int]:
    """This process's child processes and their descendants."""
    me = os.getpid()
    children = Path(f"/proc/{me}/task/{me}/children").read_text().split()
    return [pid for child in children for pid in process_tree(int(child))]


if __name__ == "__main__":
    main()
