"""Batch jobs in idle capacity: interactive chat TTFT and decode with a chat batch running against without, and the
share of the idle slot-time the batch used.

Run from the repo root: `python -m bench.batch_bench` (`nox -s bench -- batch`: hypnos-llama and the
Qwen2.5-Coder-0.5B starter, 4 slots as the starter has them), or `--fake` (the fake engine pacing tokens: the
scheduling alone, no llama). The load average before and after is printed beside the figures.
One `hypnos serve`; an interactive client sends streamed chat requests one after another with a pause between them
(so that the slots are idle part of the time), in three rounds: without a batch, with a `--lines` chat batch running
(POST /v1/files + /v1/batches, as the OpenAI SDK sends them), without again (the two rounds without are the baseline,
so that a machine whose load drifts hits both alike).
- TTFT p50 and decode tokens/s (median per request) of the interactive requests: targets <= 1.2x and >= 0.8x of
  the baseline.
- idle slot-time used: during the round with the batch, the engine time of the batch lines that were answered (from
  the request log; a line that yielded its slot is void work and not counted) over the slot-time the interactive
  requests left (slots x the round's wall time - their wall time); target >= 70%.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

MODEL = "bench-chat"
SLOTS = 4


def interactive(
    client: httpx.Client, count: int, pause: float, max_tokens: int
) -> list[tuple[float, float, float, float]]:
    """`count` streamed requests one after another: (start, TTFT ms, decode tokens/s, engine ms) of each."""
    figures = []
    for index in range(count):
        body = {
            "model": MODEL,
            "stream": True,
            "temperature": 0,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": f"Write a short note number {index} about the sea."}],
        }
        started = time.perf_counter()
        stamps: list[float] = []
        with client.stream("POST", "/v1/chat/completions", json=body) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if line.startswith("data: {") and '"content":"' in line.replace(" ", ""):
                    stamps.append(time.perf_counter())
        ended = time.perf_counter()
        if len(stamps) >= 2:
            decode = (len(stamps) - 1) / (stamps[-1] - stamps[0])
            figures.append((started, (stamps[0] - started) * 1000, decode, (ended - started) * 1000))
        time.sleep(pause)
    return figures


def start_batch(client: httpx.Client, lines: int, max_tokens: int) -> str:
    """Upload a chat batch of `lines` requests and create it; its id."""
    rows = [
        {
            "custom_id": f"b{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": MODEL,
                "temperature": 0,
                "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": f"Summarize ticket {i}: the printer is out of paper."}],
            },
        }
        for i in range(lines)
    ]
    data = "\n".join(json.dumps(row) for row in rows).encode()
    upload = client.post("/v1/files", files={"file": ("b.jsonl", data)}, data={"purpose": "batch"}).json()
    body = {"input_file_id": upload["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    return str(client.post("/v1/batches", json=body).json()["id"])


def batch_engine_ms(client: httpx.Client, batch_id: str, since: float, until: float) -> tuple[float, dict[str, Any]]:
    """The batch lines' engine time (ms) inside [since, until] (Unix seconds), from the request log, and the batch
    as it stands."""
    batch = client.get(f"/v1/batches/{batch_id}").json()
    records = client.get("/v1/logs", params={"limit": 100000}).json()["records"]
    used = 0.0
    for record in records:
        if not str(record.get("batch", "")).startswith(batch_id) or record.get("inference_ms") is None:
            continue
        if record.get("error"):  # a line that yielded its slot: void work, run again
            continue
        started = datetime.fromisoformat(record["started_at"].replace("Z", "+00:00")).timestamp()
        end = started + record["duration_ms"] / 1000
        begin = end - record["inference_ms"] / 1000
        used += max(0.0, min(end, until) - max(begin, since)) * 1000
    return used, batch


def measure(base: str, args: argparse.Namespace) -> dict[str, Any]:
    """The three rounds and the batch's figures."""
    with httpx.Client(base_url=base, timeout=600) as client:
        interactive(client, 2, 0.0, args.max_tokens)  # warm up
        first = interactive(client, args.requests, args.pause, args.max_tokens)
        batch_id = start_batch(client, args.lines, args.batch_tokens)
        time.sleep(args.settle)
        since = time.time()
        loaded = interactive(client, args.requests, args.pause, args.max_tokens)
        until = time.time()
        used, batch = batch_engine_ms(client, batch_id, since, until)
        if args.wait:
            while batch["status"] not in ("completed", "failed", "expired", "cancelled"):
                time.sleep(1)
                batch = client.get(f"/v1/batches/{batch_id}").json()
        else:
            client.post(f"/v1/batches/{batch_id}/cancel")
        last = interactive(client, args.requests, args.pause, args.max_tokens)
    interactive_ms = sum(figure[3] for figure in loaded)
    idle_ms = SLOTS * (until - since) * 1000 - interactive_ms
    return {"baseline": first + last, "loaded": loaded, "used_ms": used, "idle_ms": idle_ms, "batch": batch}


def report(figures: dict[str, Any], args: argparse.Namespace) -> None:
    """Print the table and the ratios against their targets."""
    rows = {}
    for name in ("baseline", "loaded"):
        runs = figures[name]
        rows[name] = (statistics.median(r[1] for r in runs), statistics.median(r[2] for r in runs), len(runs))
    print(f"{'interactive':<14}{'TTFT p50 ms':>12}{'decode tok/s':>14}{'requests':>10}")
    for name, (ttft, decode, count) in rows.items():
        print(f"{name:<14}{ttft:>12.1f}{decode:>14.1f}{count:>10}")
    ttft_ratio = rows["loaded"][0] / rows["baseline"][0]
    decode_ratio = rows["loaded"][1] / rows["baseline"][1]
    share = figures["used_ms"] / figures["idle_ms"] if figures["idle_ms"] > 0 else float("nan")
    batch = figures["batch"]
    print(f"TTFT with the batch / without: {ttft_ratio:.2f}x (target <= 1.2x)")
    print(f"decode with the batch / without: {decode_ratio:.2f}x (target >= 0.8x)")
    print(f"idle slot-time the batch used: {share:.0%} (target >= 70%)")
    print(f"batch {batch['id']}: {batch['status']}, request_counts {batch['request_counts']}")
    print(
        "load average (1, 5, 15 min) before: {:.1f} {:.1f} {:.1f}, after: {:.1f} {:.1f} {:.1f}".format(*figures["load"])
    )


def main() -> None:
    """Start the server, measure, report."""
    parser = argparse.ArgumentParser(prog="python -m bench.batch_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=500, help="chat lines in the batch")
    parser.add_argument("--requests", type=int, default=12, help="interactive requests per round")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between interactive requests")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens of an interactive answer")
    parser.add_argument("--batch-tokens", type=int, default=16, help="tokens of a batch line's answer")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between the batch's start and the round")
    parser.add_argument("--wait", action="store_true", help="let the batch finish before the last round")
    parser.add_argument("--fake", action="store_true", help="the fake engine (30 ms a token) instead of llama")
    parser.add_argument("--model", help="a GGUF (default: the starter)")
    args = parser.parse_args()

    from hypnos_server.testing import live_server

    with tempfile.TemporaryDirectory(prefix="hypnos-batch-bench-") as scratch:
        work = Path(scratch)
        env = {}
        if args.fake:
            config = (
                f'[server]\nrequest_log_capacity = 100000\n[[models]]\nid = "{MODEL}"\nmodality = "text_generation"\n'
                f'engine = "fake"\nslots = {SLOTS}\n[models.fake]\ntokens = 64\ntoken_ms = 30\n'
            )
            env = {"HYPNOS_PLUGINS": "fake"}
        else:
            from hypnos_llama.testing import toml_model_config

            from bench.llama_bench import _resolve_model

            model = {
                "id": MODEL,
                "modality": "text_generation",
                "engine": "ggml_llama",
                "weights_path": str(_resolve_model(args.model)),
                "context_len": 4096,
                "slots": SLOTS,
                "initial_tier": "tier1_gpu_vram",
            }
            config = toml_model_config(work, [model], extra="[server]\nrequest_log_capacity = 100000\n")
        path = work / "hypnos.toml"
        path.write_text(config)
        load = os.getloadavg()
        with live_server(path, env=env, ready_timeout=300) as base:
            figures = measure(base, args)
        figures["load"] = (*load, *os.getloadavg())
    report(figures, args)


if __name__ == "__main__":
    main()
