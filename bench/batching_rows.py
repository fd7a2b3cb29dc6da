"""What the batching benches (embeddings_bench, gliner_bench) share: a server per checkout, a crowd of requests at
once or one by one, one request's latency, and rounds that alternate the sides so that machine load hits all alike."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hypnos_server.testing import live_server

from bench.http_bench import read_response, request_bytes

REPO = Path(__file__).resolve().parent.parent


def checkout_env(checkout: Path, plugin: str) -> dict[str, str]:
    """The environment that makes a server (and its engine hosts) import a checkout's core, server and plugin, and
    load that plugin only (another installed plugin may implement hooks an older checkout does not know)."""
    sources = [checkout / "core/src", checkout / "server/src", checkout / "plugins" / plugin / "src"]
    path = os.pathsep.join(map(str, sources))
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": path, "HYPNOS_PLUGINS": plugin.removeprefix("hypnos-")}


@contextlib.contextmanager
def servers(configs: dict[str, tuple[Path, Path]], plugin: str) -> Iterator[dict[str, str]]:
    """One `hypnos serve` per side (name -> (checkout, config file)), each importing its checkout; their base URLs."""
    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(live_server(config, ready_timeout=300, env=checkout_env(checkout, plugin)))
            for name, (checkout, config) in configs.items()
        }


class LeanClient:
    """HTTP/1.1 keep-alive connections to one server with each request's bytes encoded once: on a 2-core machine an
    httpx client spent ~2.5 CPU ms a request (80 ms of the 250 for 32 concurrent embeddings), taken from the server
    it measures; this one spends a fraction of that, so the rows measure the server."""

    def __init__(self, url: str, path: str, bodies: list[dict[str, Any]]) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.requests = [request_bytes("POST", path, json.dumps(body).encode(), self.port) for body in bodies]
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def post(self, index: int) -> None:
        """Send request `index` on an idle connection (a new one when none is idle); it must answer 200."""
        reader, writer = self._idle.pop() if self._idle else await asyncio.open_connection(self.host, self.port)
        writer.write(self.requests[index])
        status = await read_response(reader)
        if status != 200:
            raise RuntimeError(f"request {index} answered {status}")
        self._idle.append((reader, writer))

    async def post_all(self) -> None:
        """Every request at once."""
        await asyncio.gather(*(self.post(index) for index in range(len(self.requests))))

    async def post_each(self) -> None:
        """The requests one by one."""
        for index in range(len(self.requests)):
            await self.post(index)

    async def latency_ms(self, times: int) -> float:
        """The median milliseconds of the first request, sent `times` times in a row."""
        spent = []
        for _ in range(times):
            started = time.perf_counter()
            await self.post(0)
            spent.append((time.perf_counter() - started) * 1000)
        return statistics.median(spent)

    def close(self) -> None:
        """Close every connection."""
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


def timed(function: Callable[[], Any]) -> float:
    """Seconds one call takes."""
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def alternate(plan: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Each measurement once per round, in an order reversed every other round; the medians."""
    samples: dict[str, list[float]] = {name: [] for name in plan}
    for index in range(rounds):
        order = list(plan) if index % 2 == 0 else list(reversed(plan))
        for name in order:
            samples[name].append(plan[name]())
    return {name: statistics.median(values) for name, values in samples.items()}


def load_line() -> str:
    """The machine's load averages, for the printed figures."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} / {five:.1f} / {fifteen:.1f}, {os.cpu_count()} CPUs"


def measure(
    urls: dict[str, str],
    route: str,
    bodies: list[dict[str, Any]],
    library: Callable[[], Any],
    rounds: int,
    times: int,
    library_each: Callable[[], Any] | None = None,
) -> dict[str, float]:
    """The rows, medians of alternating rounds: seconds of the library call, of the bodies at once and one by one on
    the `after` server; one request's milliseconds on every server."""
    loop = asyncio.new_event_loop()
    clients = {name: LeanClient(url, route, bodies) for name, url in urls.items()}
    after = clients["after"]
    plan: dict[str, Callable[[], float]] = {
        "library": lambda: timed(library),
        "concurrent": lambda: timed(lambda: loop.run_until_complete(after.post_all())),
        "one by one": lambda: timed(lambda: loop.run_until_complete(after.post_each())),
    }
    if library_each is not None:  # the library on the same inputs one call each: what batching can win at most
        plan["library one by one"] = lambda: timed(library_each)
    for name, client in clients.items():
        plan[f"one request, {name}"] = lambda client=client: loop.run_until_complete(client.latency_ms(times))
    try:
        for row in plan.values():  # warm every row once (first-request costs, kernels built per shape, page cache)
            row()
        return alternate(plan, rounds)
    finally:
        for client in clients.values():
            client.close()
        loop.close()


def report(title: str, figures: dict[str, float], requests: int, batching_target: float | None) -> None:
    """Print the rows (texts/s), the ratios against their targets and one request's latency per side."""
    print(f"{title}, {load_line()}")
    rows = ("library", "library one by one", "concurrent", "one by one")
    rate = {name: requests / figures[name] for name in rows if name in figures}
    for name, value in rate.items():
        print(f"{name:<36} {value:10.1f} texts/s")
    print(f"concurrent / library: {rate['concurrent'] / rate['library']:.2f} (target >= 0.9)")
    target = f" (target >= {batching_target:g})" if batching_target else ""
    print(f"concurrent / one by one: {rate['concurrent'] / rate['one by one']:.2f}{target}")
    if "library one by one" in rate:
        gain = rate["library"] / rate["library one by one"]
        print(f"library batched / library one by one: {gain:.2f} (what batching wins in the library itself)")
    sides = [name.removeprefix("one request, ") for name in figures if name.startswith("one request, ")]
    for side in sides:
        print(f"one request, {side}: {figures[f'one request, {side}']:.2f} ms")
    if "before" in sides:
        ratio = figures["one request, before"] / figures["one request, after"]
        print(f"one request, before / after: {ratio:.3f} (target >= 0.97)")
