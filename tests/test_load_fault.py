"""Load and faults against the real server: 200 concurrent mixed requests over three models whose tier 1 fits one.

Streams are closed at random points, one model's engine fails mid-request, and the server is SIGKILLed and
restarted. After each wave: every answer a documented status (errors in the spec's body), no lease left, the budgets
never exceeded while it ran (sampled), the server healthy, and its memory flat across a second identical wave.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from hypnos_server.testing import free_port, live_process

logger = logging.getLogger(__name__)
MiB = 1024 * 1024
WAVE = 200
MODELS = ["m1", "m2", "m3"]  # m3's engine fails every 5th chat after its first token
FAKE = "layers = 4, layer_bytes = 67108864, load_ms = 5, token_ms = 2, tokens = 12"
FAILING = {"m3": ", fail_every = 5"}
# one model books 4 x 64 + 32 MiB of weights, 64 MiB of KV at 4096 tokens and 16 MiB of workspace (368 MiB):
# a 600 MiB tier 1 holds one whole model and never two (min_gpu_layer_ratio = 1 forbids a partial second one); the
# bookings stay these estimates (measured_placement off: the fake hosts hold far less than they book)
CONFIG = f"""
[hardware]
simulate = true
measured_placement = false
simulate_vram_bytes = {600 * MiB}
vram_reserve_bytes = 0
min_gpu_layer_ratio = 1.0
pinned_ram_budget_bytes = {2048 * MiB}

[limits]
max_queue_per_model = 64
max_tokens_cap = 16
request_timeout_secs = 120
""" + "".join(
    f"""
[[models]]
id = "{model}"
modality = "text_generation"
engine = "fake"
modalities = ["embeddings"]
fake = {{ {FAKE}{FAILING.get(model, "")} }}
"""
    for model in MODELS
)
# section 4's statuses (429 model_busy, 503 deadline/staging, 507 memory); 500 only from m3's failing engine
DOCUMENTED = {200, 400, 404, 429, 503, 507}
RETRIED = {429, 507}  # model_busy and "another model holds the memory": retry after a pause (section 17)
RETRIES = 60
RSS_TOLERANCE = 1.15  # the second identical wave may grow RSS by at most 15 % (+ 16 MiB of allocator slack)


@dataclass
class Outcome:
    """What one request of a wave got."""

    kind: str
    model: str
    status: int
    error_type: str | None = None
    problems: list[str] = field(default_factory=list)


def _children(pid: int) -> list[int]:
    """Every descendant of a process, from /proc."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            found += [child, *_children(child)]
    return found


def _alive(pid: int) -> bool:
    """True while a process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _rss(pid: int) -> int:
    """Resident bytes of a process and its descendants."""
    total = 0
    for each in [pid, *_children(pid)]:
        try:
            status = Path(f"/proc/{each}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


def _error_problems(response: httpx.Response) -> list[str]:
    found = []
    if not response.headers.get("x-request-id", "").startswith("req-"):
        found.append("no x-request-id")
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
            assert isinstance(error["message"], str) and isinstance(error["type"], str)
        except (ValueError, KeyError, TypeError, AssertionError):
            found.append(f"error body not in the spec's shape: {response.content[:200]!r}")
    return found


async def _one(client: httpx.AsyncClient, rng: random.Random, index: int) -> Outcome:
    """One request of the mix, retried on 429 and 507 as section 17 says; a dropped connection (killed) is status 0."""
    kind = rng.choice(["chat", "chat", "stream", "stream-closed", "embed", "bad"])
    stop_after = rng.randint(0, 4)
    try:
        for _ in range(RETRIES):
            outcome = await _request(client, kind, stop_after, index)
            if outcome.status not in RETRIED:
                return outcome
            await asyncio.sleep(rng.uniform(0.05, 0.25))
        return outcome
    except httpx.TransportError as error:
        return Outcome("dropped", MODELS[index % 3], 0, type(error).__name__)


async def _request(client: httpx.AsyncClient, kind: str, stop_after: int, index: int) -> Outcome:
    model = MODELS[index % 3]
    messages = [{"role": "user", "content": f"request {index} says hello"}]
    if kind == "embed":
        response = await client.post("/v1/embeddings", json={"model": model, "input": [f"text {index}"]})
    elif kind == "bad":
        response = await client.post("/v1/chat/completions", json={"model": model, "messages": "not a list"})
    elif kind == "chat":
        response = await client.post("/v1/chat/completions", json={"model": model, "messages": messages})
    else:
        body = {"model": model, "messages": messages, "stream": True}
        closing = kind == "stream-closed"
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                return Outcome(kind, model, response.status_code, _type(response), _error_problems(response))
            events = []
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                if closing and len(events) > stop_after:
                    break  # closing the connection mid-stream cancels the request (section 17)
        failed = any('"finish_reason":"error"' in event for event in events)
        problems = [] if closing or events[-1:] == ["[DONE]"] else ["stream ended without [DONE]"]
        return Outcome(kind, model, 200, "server_error" if failed else None, problems)
    return Outcome(kind, model, response.status_code, _type(response), _error_problems(response))


def _type(response: httpx.Response) -> str | None:
    if response.status_code < 400:
        return None
    try:
        return str(response.json()["error"]["type"])
    except (ValueError, KeyError, TypeError):
        return None


async def _sample(base: str, stop: asyncio.Event, samples: list[dict]) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        while not stop.is_set():
            try:
                samples.append((await client.get("/v1/memory/status")).json())
            except httpx.TransportError:
                return  # the server was killed
            await asyncio.sleep(0.02)


async def _wave(base: str, seed: int, kill: subprocess.Popen[bytes] | None = None) -> tuple[list[Outcome], list[dict]]:
    """WAVE requests at once (seeded mix), the memory status sampled until the last one ends; `kill`: SIGKILL it."""
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=WAVE + 10, max_keepalive_connections=0)
    samples: list[dict] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample(base, stop, samples))
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:
        requests = asyncio.gather(*[_one(client, rng, i) for i in range(WAVE)])
        if kill is not None:
            await asyncio.sleep(0.3)
            await asyncio.to_thread(_kill_hard, kill, base)
        outcomes = await requests
    stop.set()
    await sampler
    return list(outcomes), samples


def _settled_status(base: str) -> dict:
    """The memory status once no model holds a lease (closed streams release theirs as their cancel lands)."""
    deadline = time.monotonic() + 15
    while True:
        status = httpx.get(f"{base}/v1/memory/status", timeout=30).json()
        if sum(m["active_leases"] for m in status["models"]) == 0 or time.monotonic() > deadline:
            return status  # type: ignore[no-any-return]
        time.sleep(0.1)


def _check_wave(base: str, outcomes: list[Outcome], samples: list[dict]) -> None:
    """Every invariant of one wave."""
    assert len(outcomes) == WAVE
    for outcome in outcomes:
        assert not outcome.problems, outcome
        allowed_500 = outcome.model == "m3" and outcome.error_type == "server_error"
        assert outcome.status in DOCUMENTED or (outcome.status == 500 and allowed_500), outcome
    assert any(o.kind == "stream-closed" for o in outcomes)
    assert any(o.model == "m3" and o.error_type == "server_error" for o in outcomes), "the failing engine never failed"
    for model in MODELS:  # the three took turns in tier 1
        assert any(o.model == model and o.status == 200 for o in outcomes), f"{model} never answered"
    assert sum(o.status == 200 for o in outcomes) > WAVE // 2
    assert samples, "the memory status was never sampled"
    for sample in samples:
        budget = sample["capabilities"]["usable_vram_budget_bytes"]
        assert sample["tier1_vram_used_bytes"] <= budget, sample
        assert sample["tier2_pinned_ram_used_bytes"] <= sample["capabilities"]["pinned_ram_budget_bytes"], sample
        assert sum(m["current_tier"] == "tier1_gpu_vram" for m in sample["models"]) <= 1, sample
    status = _settled_status(base)
    leaked = [m["active_leases"] for m in status["models"]]
    statuses = sorted({o.status for o in outcomes})
    logger.info("wave: statuses %s, %d memory samples, leases left %s", statuses, len(samples), leaked)
    assert leaked == [0, 0, 0], "leaked leases"
    assert httpx.get(f"{base}/health", timeout=30).status_code == 200
    assert httpx.get(f"{base}/ready", timeout=30).status_code == 200


def _kill_hard(process: subprocess.Popen[bytes], base: str) -> None:
    """SIGKILL granian's main process, then any worker that outlived it (issue 13 item 3), until the port is free."""
    workers = _children(process.pid)
    process.kill()
    process.wait()
    for pid in workers:  # our own server's workers, by id
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{base}/health", timeout=1)
        except httpx.TransportError:
            return
        time.sleep(0.1)
    raise AssertionError("the killed server still answers")


@contextlib.contextmanager
def _serve(config: Path, port: int) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """The real server on this port over the fake engines, with its process at hand."""
    with live_process(config, port=port, env={"HYPNOS_PLUGINS": "fake"}, ready_timeout=60) as (process, base):
        yield process, base


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "hypnos.toml"
    path.write_text(CONFIG)
    return path


def test_waves_with_faults_then_sigkill_and_restart(config: Path) -> None:
    port = free_port()
    with _serve(config, port) as (process, base):
        outcomes, samples = asyncio.run(_wave(base, seed=1))
        _check_wave(base, outcomes, samples)
        rss_first = _rss(process.pid)
        outcomes, samples = asyncio.run(_wave(base, seed=1))  # the identical wave: a leak check
        _check_wave(base, outcomes, samples)
        rss_second = _rss(process.pid)
        logger.info(
            "RSS after the first wave %d MiB, after the identical second %d MiB", rss_first // MiB, rss_second // MiB
        )
        assert rss_second <= rss_first * RSS_TOLERANCE + 16 * MiB, (rss_first, rss_second)
        outcomes, _ = asyncio.run(_wave(base, seed=2, kill=process))
        for outcome in outcomes:  # answered before the kill, or dropped by it
            assert outcome.status in DOCUMENTED | {0, 500}, outcome
        assert any(o.status == 0 for o in outcomes), "the kill landed after the wave"
    with _serve(config, port) as (process, base):  # a fresh process on the same port
        outcomes, samples = asyncio.run(_wave(base, seed=3))
        _check_wave(base, outcomes, samples)


def test_worker_dies_with_its_parent(config: Path) -> None:
    with _serve(config, free_port()) as (process, _):
        workers = _children(process.pid)
        assert workers, "granian started no worker process"
        process.kill()
        process.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
            time.sleep(0.1)
        survivors = [pid for pid in workers if _alive(pid)]
        for pid in survivors:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not survivors, f"workers {survivors} outlived their SIGKILLed parent"
