"""Test kit for engine host processes behind a running server: find a model's host, kill it (mid-request), and find
the hosts left on the machine (orphans) from /proc; the plugins' tests share it."""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from hypnos.hosting.host import HOST_ENV

HOST_MODULE = "hypnos.hosting"  # an engine host runs as `python -m hypnos.hosting`
T = TypeVar("T")


def status_entry(base: str, model_id: str, headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The model's entry in GET /v1/memory/status of the server at `base`."""
    request = urllib.request.Request(f"{base}/v1/memory/status", headers=dict(headers or {}))
    with urllib.request.urlopen(request, timeout=10) as response:
        models = json.loads(response.read())["models"]
    return next(model for model in models if model["id"] == model_id)


def host_pid(base: str, model_id: str, headers: Mapping[str, str] | None = None) -> int | None:
    """The pid of the model's engine host from the status (None while none runs)."""
    process = status_entry(base, model_id, headers)["engine_process"]
    return None if process is None else int(process["pid"])


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.02) -> bool:
    """Poll `predicate` until it holds (True) or `timeout` seconds passed (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)


def kill_host(base: str, model_id: str, headers: Mapping[str, str] | None = None, timeout: float = 15.0) -> int:
    """SIGKILL the model's running engine host and wait until the server shows it gone; its pid."""
    pid = host_pid(base, model_id, headers)
    assert pid is not None, f"no engine host runs for {model_id}"
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: host_pid(base, model_id, headers) != pid, timeout), f"the server kept {pid} listed"
    return pid


def kill_host_during(
    base: str,
    model_id: str,
    send: Callable[[], T],
    headers: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> tuple[int, T]:
    """Run `send` (one request) in a thread, SIGKILL the model's host once the request holds the model (a lease),
    and return the killed pid and what `send` returned (it must not finish before the kill: the test then fails)."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = send()
        except BaseException as error:  # re-raised in the test's thread
            result["error"] = error

    sender = threading.Thread(target=run, name=f"send-{model_id}", daemon=True)
    sender.start()

    def in_flight() -> bool:
        entry = status_entry(base, model_id, headers)
        return not sender.is_alive() or (entry["active_leases"] > 0 and entry["engine_process"] is not None)

    assert wait_until(in_flight, timeout), f"no request of {model_id} became active in {timeout} s"
    assert sender.is_alive(), f"the request finished before the host of {model_id} could be killed: {result}"
    pid = kill_host(base, model_id, headers)
    sender.join(timeout)
    assert not sender.is_alive(), f"the request to {model_id} did not end {timeout} s after its host was killed"
    if "error" in result:
        raise result["error"]
    return pid, result["value"]


def alive(pid: int) -> bool:
    """Whether a process (not a zombie) with this pid exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return stat.rsplit(") ", 1)[1][:1] != "Z"


def descendants(pid: int) -> set[int]:
    """Every live descendant of a process (children of all its threads, recursively), from /proc."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                children = {int(child) for child in (task / "children").read_text().split()}
            except OSError:
                continue
            todo.extend(children - found)
            found |= children
    return found


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (entry.decode(errors="replace").partition("=") for entry in raw.split(b"\0") if entry)
    return {key: value for key, _, value in pairs}


def _is_host(pid: int, env: dict[str, str]) -> bool:
    if HOST_ENV in env:
        return True
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(a == b"-m" and b == HOST_MODULE.encode() for a, b in itertools.pairwise(argv))


def engine_hosts(*, under: int | None = None, marker: tuple[str, str] | None = None) -> dict[int, str]:
    """Live engine host processes (pid -> model id), known by HYPNOS_ENGINE_HOST in their environment or
    `-m hypnos.hosting` in their command line: those descending from `under`, and/or whose environment holds the
    `marker` (name, value) a test gave its server (it survives the server's death, when the parent is gone)."""
    if under is not None:
        pids = descendants(under)
    else:
        pids = {int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()}
    hosts: dict[int, str] = {}
    for pid in sorted(pids):
        env = _environ(pid)
        if marker is not None and env.get(marker[0]) != marker[1]:
            continue
        if _is_host(pid, env) and alive(pid):
            hosts[pid] = env.get(HOST_ENV, "?")
    return hosts
