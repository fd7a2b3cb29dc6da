"""What the batching benches (embeddings_bench, gliner_bench) share: a server per checkout, a crowd of requests at
once or one by one, one request's latency, and rounds that alternate the sides so that machine load hits all alike."""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hypnos_server.testing import live_server

REPO = Path(__file__).resolve().parent.parent


def checkout_env(checkout: Path, plugin: str) -> dict[str, str]:
    """The environment that makes a server (and its engine hosts) import a checkout's core, server and plugin."""
    sources = [checkout / "core/src", checkout / "server/src", checkout / "plugins" / plugin / "src"]
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(map(str, sources))}


@contextlib.contextmanager
def servers(configs: dict[str, tuple[Path, Path]], plugin: str) -> Iterator[dict[str, str]]:
    """One `hypnos serve` per side (name -> (checkout, config file)), each importing its checkout; their base URLs."""
    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(live_server(config, ready_timeout=300, env=checkout_env(checkout, plugin)))
            for name, (checkout, config) in configs.items()
        }


async def post_all(client: Any, path: str, bodies: list[dict[str, Any]]) -> None:
    """Every body at once (one request each), all answered 200."""
    answers = await asyncio.gather(*(client.post(path, json=body) for body in bodies))
    for answer in answers:
        answer.raise_for_status()


async def post_each(client: Any, path: str, bodies: list[dict[str, Any]]) -> None:
    """The bodies one by one."""
    for body in bodies:
        (await client.post(path, json=body)).raise_for_status()


async def latency_ms(client: Any, path: str, body: dict[str, Any], times: int) -> float:
    """The median milliseconds of one request, sent `times` times in a row."""
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        (await client.post(path, json=body)).raise_for_status()
        spent.append((time.perf_counter() - started) * 1000)
    return statistics.median(spent)


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
    urls: dict[str, str], route: str, bodies: list[dict[str, Any]], library: Callable[[], Any], rounds: int, times: int
) -> dict[str, float]:
    """The rows, medians of alternating rounds: seconds of the library call, of the bodies at once and one by one on
    the `after` server; one request's milliseconds on every server."""
    import httpx

    loop = asyncio.new_event_loop()
    limits = httpx.Limits(max_connections=2 * len(bodies))
    clients = {name: httpx.AsyncClient(base_url=url, timeout=600, limits=limits) for name, url in urls.items()}
    after = clients["after"]
    plan: dict[str, Callable[[], float]] = {
        "library": lambda: timed(library),
        "concurrent": lambda: timed(lambda: loop.run_until_complete(post_all(after, route, bodies))),
        "one by one": lambda: timed(lambda: loop.run_until_complete(post_each(after, route, bodies))),
    }
    for name, client in clients.items():
        plan[f"one request, {name}"] = lambda client=client: loop.run_until_complete(
            latency_ms(client, route, bodies[0], times)
        )
    try:
        for row in plan.values():  # warm every row once (first-request costs, kernels built per shape, page cache)
            row()
        return alternate(plan, rounds)
    finally:
        for client in clients.values():
            loop.run_until_complete(client.aclose())
        loop.close()


def report(title: str, figures: dict[str, float], requests: int, batching_target: float | None) -> None:
    """Print the rows (texts/s), the ratios against their targets and one request's latency per side."""
    print(f"{title}, {load_line()}")
    rate = {name: requests / figures[name] for name in ("library", "concurrent", "one by one")}
    for name, value in rate.items():
        print(f"{name:<36} {value:10.1f} texts/s")
    print(f"concurrent / library: {rate['concurrent'] / rate['library']:.2f} (target >= 0.9)")
    target = f" (target >= {batching_target:g})" if batching_target else ""
    print(f"concurrent / one by one: {rate['concurrent'] / rate['one by one']:.2f}{target}")
    sides = [name.removeprefix("one request, ") for name in figures if name.startswith("one request, ")]
    for side in sides:
        print(f"one request, {side}: {figures[f'one request, {side}']:.2f} ms")
    if "before" in sides:
        ratio = figures["one request, before"] / figures["one request, after"]
        print(f"one request, before / after: {ratio:.3f} (target >= 0.97)")
