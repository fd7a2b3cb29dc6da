"""The Ray path's overhead: the same streamed chat through a front + node agent vs a single-machine server.

Run from the repo root: `python -m bench.ray_bench` (needs hypnos-server[ray] and the fake plugin). Two real
`hypnos serve` processes on loopback: one plain, one with `[cluster] address = "local"` (a one-node Ray started by
the front, one agent). Both serve the same fake chat model (a fixed per-token rate), driven in alternating rounds by
one streaming client. Prints median TTFT and decode tokens/s of each, the tokens/s ratio (target >= 0.95) and the
TTFT the cluster path adds (target <= 5 ms on loopback).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from hypnos_server.testing import live_server

MODEL = """
[[models]]
id = "bench-chat"
modality = "text_generation"
engine = "fake"
initial_tier = "tier1_gpu_vram"
[models.fake]
layers = 1
layer_bytes = 1048576
tokens = {tokens}
token_ms = {token_ms}
"""
CLUSTER = '\n[cluster]\naddress = "local"\nstream_window_ms = {window}\n'


def stream_once(client: httpx.Client, base: str) -> tuple[float, float, int]:
    """(TTFT ms, decode tokens/s, content pieces) of one streamed chat."""
    body = {"model": "bench-chat", "stream": True, "messages": [{"role": "user", "content": "count for me"}]}
    started = time.perf_counter()
    first = last = 0.0
    pieces = 0
    with client.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            choice = json.loads(line[6:])["choices"][0]
            if choice["delta"].get("content"):
                last = time.perf_counter()
                first = first or last
                pieces += 1
    ttft = (first - started) * 1000
    rate = (pieces - 1) / (last - first) if pieces > 1 and last > first else 0.0
    return ttft, rate, pieces


def main() -> None:
    """Measure both servers in alternating rounds and print the figures and ratios."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--token-ms", type=float, default=5.0)
    parser.add_argument("--window-ms", type=float, default=5.0)
    args = parser.parse_args()
    model = MODEL.format(tokens=args.tokens, token_ms=args.token_ms)
    with tempfile.TemporaryDirectory() as folder:
        plain, cluster = Path(folder) / "plain.toml", Path(folder) / "cluster.toml"
        plain.write_text(model)
        cluster.write_text(model + CLUSTER.format(window=args.window_ms))
        env = {"HYPNOS_PLUGINS": "fake"}
        with (
            live_server(plain, env=env) as one,
            live_server(cluster, env=env, ready_timeout=180) as front,
            httpx.Client(timeout=120) as client,
        ):
            figures: dict[str, list[tuple[float, float, int]]] = {"single": [], "ray": []}
            for base in (one, front):  # warm-up
                stream_once(client, base)
            for _ in range(args.rounds):
                figures["single"].append(stream_once(client, one))
                figures["ray"].append(stream_once(client, front))
    ttft = {name: statistics.median(f[0] for f in runs) for name, runs in figures.items()}
    rate = {name: statistics.median(f[1] for f in runs) for name, runs in figures.items()}
    for name in figures:
        print(f"{name:7s} TTFT p50 {ttft[name]:7.2f} ms   decode {rate[name]:8.1f} tokens/s")
    print(f"tokens/s ratio ray/single: {rate['ray'] / rate['single']:.3f} (target >= 0.95)")
    print(f"TTFT added by the Ray path: {ttft['ray'] - ttft['single']:+.2f} ms (target <= 5 ms)")


if __name__ == "__main__":
    main()
