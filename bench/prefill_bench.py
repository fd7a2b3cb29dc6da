"""Prefill that yields: a client leaving during a ~10k-token prefill, and another stream's pace beside that prefill.

`python -m bench prefill [--before CHECKOUT]` on the Qwen2.5-Coder-0.5B starter (4 slots of 8192 cells in one unified
pool, as the starter config has it, so a 10k-token prompt fits). A server is started for this checkout, and with
`--before` one for an older checkout (e.g. main's worktree; each imports its checkout's sources, as llama_ab_bench
does); on each, in turn:

(a) a Messages stream with a ~10k-token prompt whose client leaves `--leave-after` seconds after sending it: how long
    until the model's lease is back (its slot free), whether the engine host is the same process (not killed), and
    how much of the prompt had been prefilled (a retry of the same prompt reports it as cached tokens);
(b) a chat stream decoding alone, then beside a fresh ~10k-token prompt's prefill, and the same stream alone
    throughout (the control), each on a fresh server: its decode time over the tokens it wrote beside the prefill
    against the control's time over the same tokens (target >= 0.8). A stream's own steps slow as its context grows
    (on the 0.5B starter, 2 cores, a counting stream's decode step went from ~30 ms to ~43 ms over its first 1,300
    tokens, no other request), so its rate just before the prompt came (also printed) is no measure of its rate
    alone later; and in the unified KV pool a step spans the cells up to the highest used, so idle cells of earlier
    requests lying among the stream's slow it too (a control after one beside run on the same server: 999 tokens in
    66 s against 1,258 on a fresh one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypnos_server.testing import stop_process

from bench.llama_ab_bench import SOURCES
from bench.llama_bench import _hypnos_command, _resolve_model, _wait_ready

COUNTING = "Count from 1 to 5000, one number per line, nothing else."
SENTENCE = "Line {i}: the keeper wrote that the lamp was trimmed, the glass was clean and the sea was calm tonight.\n"


def long_prompt(tokens: int) -> str:
    """About `tokens` tokens of text no earlier request began with (a fresh tag first)."""
    lines = [f"Log {secrets.token_hex(4)}. Read the log and say how many lines it has.\n"]
    lines += [SENTENCE.format(i=i) for i in range(tokens // 25)]  # about 25 tokens a line
    return "".join(lines)


@contextlib.contextmanager
def server(checkout: Path, work: Path, gguf: Path, port: int, threads: int) -> Iterator[str]:
    """A Hypnos server importing `checkout`'s sources, serving the starter as `bench` (starter slots and context)."""
    command = _hypnos_command(work, gguf, port, threads, 8192, {})
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(str(checkout / source) for source in SOURCES),
    }
    with (work / f"server-{port}.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            _wait_ready(f"http://127.0.0.1:{port}", "/ready", process)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_process(process)


async def status(client: Any, url: str) -> dict[str, Any]:
    """The bench model's entry of /v1/memory/status."""
    models = (await client.get(f"{url}/v1/memory/status", timeout=30)).json()["models"]
    return next(model for model in models if model["id"] == "bench")


async def leave_mid_prefill(url: str, prompt_tokens: int, leave_after: float, max_wait: float) -> dict[str, Any]:
    """(a): send the long Messages stream over a plain socket, close it `leave_after` s later, time the lease's
    return; a retry of the same prompt tells how much had been prefilled."""
    import httpx

    prompt = long_prompt(prompt_tokens)
    body = {"model": "bench", "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": prompt}]}
    async with httpx.AsyncClient(timeout=max_wait) as client:
        pid = (await status(client, url))["engine_process"]["pid"]
        sent = time.perf_counter()
        encoded = json.dumps(body).encode()
        first_event = await asyncio.to_thread(send_and_leave, url, encoded, leave_after, b"message_start")
        left = time.perf_counter()
        while (entry := await status(client, url))["active_leases"] and time.perf_counter() - left < max_wait:  # noqa: ASYNC110 (the server's status is polled)
            await asyncio.sleep(0.02)
        freed = time.perf_counter()
        retry = {**body, "stream": False, "max_tokens": 1}
        answer = (await client.post(f"{url}/v1/messages", json=retry)).json()
        after = await status(client, url)
    usage = answer.get("usage") or {}
    engine = (answer.get("hypnos_telemetry") or {}).get("engine") or {}
    return {
        "first_event_s": first_event - sent if first_event is not None else None,
        "freed_ms": (freed - left) * 1000,
        "still_leased": bool(entry["active_leases"]),
        "same_host": (after.get("engine_process") or {}).get("pid") == pid,
        "prompt_tokens": usage.get("input_tokens", 0) + usage.get("cache_read_input_tokens", 0),
        "prefilled_at_leave": usage.get("cache_read_input_tokens"),
        "prefill_tps": engine.get("prefill_tokens_per_s"),
    }


def send_and_leave(url: str, body: bytes, seconds: float, marker: bytes, stop_at_marker: bool = False) -> float | None:
    """POST `body` to /v1/messages on a plain socket, read for `seconds` (or until `marker` when `stop_at_marker`),
    then close it (the client leaves); when `marker` arrived (None: not within the time)."""
    from hypnos_server.testing import raw_post

    seen = None
    deadline = time.perf_counter() + seconds
    with raw_post(url, "/v1/messages", body) as sock:
        received = b""
        while (remaining := deadline - time.perf_counter()) > 0:
            sock.settimeout(remaining)
            try:
                piece = sock.recv(65536)
            except TimeoutError:
                break
            if not piece:
                break
            received = received[-64:] + piece
            if seen is None and marker in received:
                seen = time.perf_counter()
                if stop_at_marker:
                    break
    return seen


async def pace_beside_prefill(
    url: str, prompt_tokens: int, alone_secs: float, beside_secs: float, prefill: bool = True
) -> dict[str, Any]:
    """(b): a counting stream's decode rate alone, then while a fresh long prompt prefills beside it (for at most
    `beside_secs`, then both clients leave); without `prefill`, alone throughout (the control)."""
    import httpx

    stamps: list[float] = []
    marks: dict[str, float] = {}
    decoding, done = asyncio.Event(), asyncio.Event()
    body = {"model": "bench", "messages": [{"role": "user", "content": COUNTING}], "max_tokens": 6000}
    body |= {"temperature": 0, "stream": True}
    long_body = {"model": "bench", "max_tokens": 4, "stream": True}
    long_body["messages"] = [{"role": "user", "content": long_prompt(prompt_tokens)}]
    async with httpx.AsyncClient(timeout=3600) as client:

        async def counting() -> None:
            try:
                async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                    async for line in response.aiter_lines():
                        if done.is_set():
                            return
                        if '"error"' in line:
                            marks["counting_error"] = time.perf_counter()
                            print(f"the counting stream failed: {line[:300]}", flush=True)
                        if line.startswith("data: {") and '"content":"' in line and '"content":""' not in line:
                            stamps.append(time.perf_counter())
                            if len(stamps) == 2:
                                decoding.set()
            finally:
                decoding.set()  # also when it ended early: the measurement then shows it

        streaming = asyncio.ensure_future(counting())
        await decoding.wait()
        await asyncio.sleep(alone_secs)
        marks["long_sent"] = time.perf_counter()
        if prefill:
            long_encoded = json.dumps(long_body).encode()
            first_text = await asyncio.to_thread(send_and_leave, url, long_encoded, beside_secs, b"text_delta", True)
        else:
            await asyncio.sleep(beside_secs)
            first_text = None
        marks["window_end"] = time.perf_counter()
        if first_text is not None:
            marks["first_text"] = first_text
        done.set()
        await streaming
    if len(stamps) < 2:
        raise SystemExit("the counting stream ended before decoding")
    start, sent = stamps[1], marks["long_sent"]
    end = min(marks.get("first_text", marks["window_end"]), stamps[-1])
    alone = [t for t in stamps if start <= t <= sent]
    beside = [t for t in stamps if sent <= t <= end]
    alone_tps = (len(alone) - 1) / (alone[-1] - alone[0]) if len(alone) > 1 else 0.0
    beside_tps = len(beside) / (end - sent) if end > sent else 0.0
    return {
        "alone_tps": alone_tps,
        "beside_tps": beside_tps,
        "ratio": beside_tps / alone_tps if alone_tps else 0.0,
        "overlap_s": end - sent,
        "long_ttft_s": marks["first_text"] - sent if "first_text" in marks else None,
        "first_beside": len(stamps) - len([t for t in stamps if t >= sent]),  # the index of its first token beside
        "beside_tokens": len(beside),
        "stamps": [t - stamps[0] for t in stamps],
    }


def same_tokens_ratio(pace: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """The control's time over the tokens the stream wrote beside the prefill, against the stream's own time."""
    first, last = pace["first_beside"], pace["first_beside"] + pace["beside_tokens"] - 1
    ours, theirs = pace["stamps"], control["stamps"]
    if last <= first or last >= len(theirs):
        return {"same_tokens_ratio": None, "tokens": [first, last]}
    alone_s, beside_s = theirs[last] - theirs[first], ours[last] - ours[first]
    return {"same_tokens_ratio": alone_s / beside_s, "tokens": [first, last], "alone_s": alone_s, "beside_s": beside_s}


def report(name: str, left: dict[str, Any], paces: list[dict[str, Any]]) -> None:
    """Print one checkout's figures: (a), then (b) per round and the median over rounds."""
    first = left["first_event_s"]
    bound = " (still leased at the bound)" if left["still_leased"] else ""
    print(f"== {name}")
    print(
        f"(a) first event {'none before leaving' if first is None else f'{first * 1000:.0f} ms'}; slot free "
        f"{left['freed_ms']:.0f} ms after the client left{bound}"
        f"; same engine host: {left['same_host']}; prefilled when it stopped: {left['prefilled_at_leave']} of "
        f"{left['prompt_tokens']} tokens; prefill {left['prefill_tps'] or 0:.0f} tok/s"
    )
    for pace in paces:
        same = pace["same"]
        first, last = same["tokens"]
        measured = (
            f"{same['same_tokens_ratio']:.2f}x (tokens {first}-{last}: {same['alone_s']:.1f} s alone, "
            f"{same['beside_s']:.1f} s beside)"
            if same["same_tokens_ratio"] is not None
            else f"not measured (the control wrote fewer than {last + 1} tokens)"
        )
        print(
            f"(b) beside the prefill against the same tokens alone: {measured}; against its own rate just before: "
            f"{pace['alone_tps']:.2f} tok/s alone, {pace['beside_tps']:.2f} beside, {pace['ratio']:.2f}x over "
            f"{pace['overlap_s']:.1f} s; the long prompt's first token "
            + ("not within the window" if pace["long_ttft_s"] is None else f"after {pace['long_ttft_s']:.1f} s")
        )
    ratios = [pace["same"]["same_tokens_ratio"] for pace in paces if pace["same"]["same_tokens_ratio"] is not None]
    if len(ratios) > 1:
        print(f"(b) median over {len(ratios)} rounds: {statistics.median(ratios):.2f}x (min {min(ratios):.2f}x)")
    sys.stdout.flush()


def main() -> None:
    """Measure this checkout (and the --before one) and print the figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", help="an older checkout (a git worktree) measured the same way first")
    parser.add_argument("--after", default=str(Path(__file__).resolve().parent.parent), help="the new checkout")
    parser.add_argument("--model", help="a GGUF (default: the Qwen2.5-Coder-0.5B starter)")
    parser.add_argument("--prompt-tokens", type=int, default=10000)
    parser.add_argument("--leave-after", type=float, default=3.0, help="seconds after sending when the client leaves")
    parser.add_argument("--alone-secs", type=float, default=5.0, help="the counting stream's alone window")
    parser.add_argument("--beside-secs", type=float, default=60.0, help="the most the beside window lasts")
    parser.add_argument("--rounds", type=int, default=1, help="(b)'s control and beside pairs (a stream alone varies)")
    parser.add_argument("--max-wait", type=float, default=900.0, help="bound on waiting for the slot")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--port", type=int, default=9104)
    args = parser.parse_args()
    gguf = _resolve_model(args.model)
    checkouts = [("after", Path(args.after).resolve())]
    if args.before:
        checkouts.insert(0, ("before", Path(args.before).resolve()))
    with tempfile.TemporaryDirectory(prefix="hypnos-prefill-") as tmp:
        for name, checkout in checkouts:
            with server(checkout, Path(tmp), gguf, args.port, args.threads) as url:
                left = asyncio.run(leave_mid_prefill(url, args.prompt_tokens, args.leave_after, args.max_wait))
                print(json.dumps({"checkout": name, "leave": left}), flush=True)
            # the control and the stream beside the prefill each on a fresh server: the same empty KV pool (idle
            # cells of earlier requests lying among the stream's own slow its steps)
            timing = (args.prompt_tokens, args.alone_secs, args.beside_secs)
            paces = []
            for _ in range(args.rounds):
                with server(checkout, Path(tmp), gguf, args.port, args.threads) as url:
                    control = asyncio.run(pace_beside_prefill(url, *timing, prefill=False))
                with server(checkout, Path(tmp), gguf, args.port, args.threads) as url:
                    pace = asyncio.run(pace_beside_prefill(url, *timing))
                pace["same"] = same_tokens_ratio(pace, control)
                shown = {key: value for key, value in pace.items() if key != "stamps"}
                print(json.dumps({"checkout": name, "pace": shown, "control": len(control["stamps"])}), flush=True)
                paces.append(pace)
            report(f"{name} ({checkout})", left, paces)


if __name__ == "__main__":
    main()
