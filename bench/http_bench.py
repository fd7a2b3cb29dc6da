"""HTTP serving: requests/s and p99 of GET /v1/models and small POST routes, Hypnos vs llama_cpp.server.

Run from the repo root: `python -m bench.http_bench` (needs llama-cpp-python with its server extras: fastapi,
uvicorn, sse-starlette, starlette-context, pydantic-settings). Both servers run at once on loopback (idle while the
other is measured); each route is driven by the same bounded asyncio load generator (keep-alive HTTP/1.1
connections, a fixed concurrency, a request and a time cap) in alternating rounds, so that background load on the
machine hits both alike.
Hypnos runs as `hypnos serve` (granian); llama_cpp.server serves a tiny random llama GGUF written here with the `gguf`
package. Routes: GET /v1/models; POST /v1/embeddings (Hypnos: a fake-engine model, so this one measures Hypnos' HTTP
path against llama's HTTP path plus a tiny real embedding); POST /v1/chat/completions with max_tokens 1 on the same
tiny GGUF in both servers (Hypnos through hypnos-llama; equal model work). Prints requests/s, p50 and p99 per route
and the Hypnos/llama ratio (target >= 1.5x).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypnos_server.testing import free_port, stop_process

HOST = "127.0.0.1"
# llama.cpp threads for both servers alike (llama_cpp.server's own default: half the CPUs).
THREADS = max(1, (os.cpu_count() or 2) // 2)
EMBED_BODY = {"model": "bench-embed", "input": "the quick brown fox jumps over the lazy dog"}
CHAT_BODY = {
    "model": "bench-tiny",
    "messages": [{"role": "user", "content": "the fox"}],
    "max_tokens": 1,
    "temperature": 0.0,
}


@dataclass
class RouteResult:
    """One route's figures under load."""

    requests: int
    errors: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rps(self) -> float:
        """Completed requests per second."""
        return self.requests / self.seconds if self.seconds else 0.0

    def quantile(self, q: float) -> float:
        """A latency quantile (ms)."""
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---- the load generator ---------------------------------------------------------------------------------------------


def request_bytes(method: str, path: str, body: bytes | None, port: int) -> bytes:
    """One HTTP/1.1 keep-alive request, encoded."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}:{port}", "Connection: keep-alive", "Accept: */*"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


async def read_response(reader: asyncio.StreamReader) -> int:
    """Read one response (Content-Length or chunked body) and return its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        if b":" in line:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
    if b"content-length" in headers:
        await reader.readexactly(int(headers[b"content-length"]))
    elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def _worker(port: int, payload: bytes, deadline: float, budget: list[int], out: RouteResult) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        while budget[0] > 0 and time.perf_counter() < deadline:
            budget[0] -= 1
            started = time.perf_counter()
            writer.write(payload)
            status = await read_response(reader)
            out.latencies_ms.append((time.perf_counter() - started) * 1000)
            out.requests += 1
            if status >= 400:
                out.errors += 1
    finally:
        writer.close()


async def load(
    port: int, method: str, path: str, body: Any, *, concurrency: int, requests: int, seconds: float, warmup: int
) -> RouteResult:
    """Drive one route with `concurrency` keep-alive connections until `requests` or `seconds` run out."""
    raw = json.dumps(body).encode() if body is not None else None
    payload = request_bytes(method, path, raw, port)
    if warmup:
        scratch = RouteResult(0, 0, 0.0, [])
        await asyncio.gather(
            *[
                _worker(port, payload, time.perf_counter() + seconds, [warmup // concurrency + 1], scratch)
                for _ in range(concurrency)
            ]
        )
    result = RouteResult(0, 0, 0.0, [])
    budget = [requests]
    started = time.perf_counter()
    await asyncio.gather(*[_worker(port, payload, started + seconds, budget, result) for _ in range(concurrency)])
    result.seconds = time.perf_counter() - started
    return result


# ---- the servers ----------------------------------------------------------------------------------------------------


def wait_http(url: str, process: subprocess.Popen[bytes], timeout: float = 90.0) -> None:
    """Poll a URL until it answers 200 (granian prints Listening before its worker answers)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


HYPNOS_CONFIG = """
[server]
host = "127.0.0.1"
port = {port}

[[models]]
id = "bench-chat"
modality = "text_generation"
engine = "fake"
initial_tier = "tier1_gpu_vram"

[[models]]
id = "bench-embed"
modality = "embeddings"
engine = "fake"
initial_tier = "tier1_gpu_vram"
"""

LLAMA_MODEL = """
[[models]]
id = "bench-tiny"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "tiny.gguf"
initial_tier = "tier1_gpu_vram"
context_len = 512
slots = {slots}

[models.llama]
n_threads = {threads}
n_threads_batch = {threads}
"""


def start_hypnos(workdir: Path, port: int, with_llama: bool, slots: int = 1) -> subprocess.Popen[bytes]:
    """`hypnos serve` (granian, one worker) with two fake-engine models, and the tiny GGUF on hypnos-llama."""
    config = workdir / "hypnos.toml"
    config.write_text(
        f'models_dir = "{workdir}"\n'
        + HYPNOS_CONFIG.format(port=port)
        + (LLAMA_MODEL.format(threads=THREADS, slots=slots) if with_llama else "")
    )
    env = {**os.environ, "HYPNOS_PLUGINS": "fake,llama" if with_llama else "fake"}
    command = [sys.executable, "-m", "hypnos_server.cli", "serve", "--config", str(config), "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://{HOST}:{port}/ready", process)
    return process


def start_llama_server(model: Path, port: int) -> subprocess.Popen[bytes]:
    """llama_cpp.server on the tiny GGUF with embeddings enabled (it answers whatever model name is asked)."""
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        "bench-tiny",
        "--host",
        HOST,
        "--port",
        str(port),
        "--embedding",
        "true",
        "--n_ctx",
        "512",
        "--n_threads",
        str(THREADS),
        "--n_threads_batch",
        str(THREADS),
        "--verbose",
        "false",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://{HOST}:{port}/v1/models", process)
    return process


# ---- the run --------------------------------------------------------------------------------------------------------

Route = tuple[str, str, str, Any]
BASE_ROUTES: list[Route] = [
    ("GET /v1/models", "GET", "/v1/models", None),
    ("POST /v1/embeddings", "POST", "/v1/embeddings", EMBED_BODY),
]
CHAT_ROUTE: Route = ("POST /v1/chat (tiny)", "POST", "/v1/chat/completions", CHAT_BODY)


def measure(port: int, route: Route, args: argparse.Namespace, *, warmup: int) -> RouteResult:
    """One route against one server, for one round."""
    _label, method, path, body = route
    return asyncio.run(
        load(
            port,
            method,
            path,
            body,
            concurrency=args.concurrency,
            requests=args.requests,
            seconds=args.seconds,
            warmup=warmup,
        )
    )


def merge(results: list[RouteResult]) -> RouteResult:
    """Several rounds as one: summed requests and time, every latency."""
    merged = RouteResult(0, 0, 0.0, [])
    for result in results:
        merged.requests += result.requests
        merged.errors += result.errors
        merged.seconds += result.seconds
        merged.latencies_ms.extend(result.latencies_ms)
    return merged


def main(argv: list[str] | None = None) -> int:
    """Start both servers, measure every route in alternating rounds, print the table and the ratios."""
    parser = argparse.ArgumentParser(prog="python -m bench.http_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=8, help="keep-alive connections per route")
    parser.add_argument("--requests", type=int, default=20000, help="request cap per route and round")
    parser.add_argument("--seconds", type=float, default=3.0, help="time cap per route and round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per route (evens out load)")
    parser.add_argument("--warmup", type=int, default=300, help="requests before the first round")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument("--slots", type=int, default=1, help="Hypnos slots for the tiny GGUF (llama_cpp.server: 1)")
    parser.add_argument("--no-chat", action="store_true", help="skip the tiny-GGUF chat route (needs hypnos-llama)")
    args = parser.parse_args(argv)
    with_llama = not args.no_chat and importlib.util.find_spec("hypnos_llama") is not None
    routes = [*BASE_ROUTES, CHAT_ROUTE] if with_llama else list(BASE_ROUTES)
    rounds: dict[str, dict[str, list[RouteResult]]] = {"hypnos": {}, "llama_cpp.server": {}}
    with tempfile.TemporaryDirectory(prefix="hypnos-http-bench-") as tmp:
        workdir = Path(tmp)
        from hypnos_llama.testing import write_tiny_llama

        model = write_tiny_llama(workdir / "tiny.gguf", context=2048)
        ports = {"hypnos": free_port(), "llama_cpp.server": free_port()}
        processes = [start_hypnos(workdir, ports["hypnos"], with_llama, args.slots)]
        try:
            processes.append(start_llama_server(model, ports["llama_cpp.server"]))
            for route in routes:
                for index in range(args.rounds):
                    order = list(ports) if index % 2 == 0 else list(reversed(ports))
                    for name in order:
                        result = measure(ports[name], route, args, warmup=args.warmup if index == 0 else 0)
                        rounds[name].setdefault(route[0], []).append(result)
        finally:
            for process in processes:
                stop_process(process)
    figures = {
        name: {label: merge(results) for label, results in by_route.items()} for name, by_route in rounds.items()
    }
    print(
        f"concurrency {args.concurrency}, {args.rounds} alternating rounds of at most {args.requests} requests"
        f" or {args.seconds:g} s per route and server; llama.cpp threads {THREADS}, Hypnos slots {args.slots}"
    )
    print(f"{'route':<22}{'server':<18}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}")
    summary: dict[str, Any] = {}
    for label, *_ in routes:
        for name, by_route in figures.items():
            r = by_route[label]
            print(f"{label:<22}{name:<18}{r.rps:>10.0f}{r.quantile(0.5):>10.2f}{r.quantile(0.99):>10.2f}{r.errors:>8}")
        hypnos, llama = figures["hypnos"][label], figures["llama_cpp.server"][label]
        ratio = hypnos.rps / llama.rps if llama.rps else float("inf")
        p99_ratio = llama.quantile(0.99) / hypnos.quantile(0.99)
        print(f"{label:<22}{'ratio':<18}{ratio:>9.2f}x{'':>10}{p99_ratio:>9.2f}x   (target >= 1.5x req/s)")
        summary[label] = {
            name: {
                "rps": round(r.rps, 1),
                "p50_ms": round(r.quantile(0.5), 3),
                "p99_ms": round(r.quantile(0.99), 3),
                "errors": r.errors,
                "requests": r.requests,
            }
            for name, r in ((n, figures[n][label]) for n in figures)
        }
        summary[label]["rps_ratio"] = round(ratio, 2)
    if args.json:
        print(json.dumps(summary, indent=2))
    failed = any(figures[n][label].errors for n in figures for label, *_ in routes)
    if failed:
        print("some requests failed: the figures are not comparable", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
