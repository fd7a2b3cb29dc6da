"""The worker dies with granian's main process; a second `hypnos serve` refuses a port a live server holds."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import http.client
import json
import logging
import os
import signal
import socket
import sys
import threading
import time

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_SECS = 0.5


def tie_to_parent() -> None:
    """In granian's worker: SIGKILL when the parent dies (Linux prctl), and a thread that exits once it is gone."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
                logger.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    if os.getppid() != parent or parent == 1:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="hypnos-lifeline", daemon=True).start()


def _watch_parent(parent: int) -> None:
    """Fallback where prctl is missing: poll the parent pid and leave at once when the worker is re-parented."""
    while os.getppid() == parent:
        time.sleep(WATCH_INTERVAL_SECS)
    logger.error("granian's main process (pid %d) is gone; this worker exits", parent)
    os._exit(1)


def port_in_use(host: str, port: int) -> bool:
    """True when something listens on host:port (a bind without SO_REUSEPORT fails with EADDRINUSE)."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return False  # granian reports an unusable address itself
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT leftovers do not count
        try:
            probe.bind(address)
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


def holder_of(host: str, port: int) -> str:
    """Who holds host:port, for the refusal message: a Hypnos (with its version) when /health says so."""
    connect_host = "127.0.0.1" if host in ("", "0.0.0.0") else "::1" if host == "::" else host
    try:
        connection = http.client.HTTPConnection(connect_host, port, timeout=2)
        connection.request("GET", "/health")
        body = json.loads(connection.getresponse().read(4096))
        connection.close()
    except (OSError, ValueError, http.client.HTTPException):
        return "another program"
    if isinstance(body, dict) and body.get("service") == "hypnos":
        return f"a running Hypnos {body.get('version', '')}".rstrip()
    return "another program"
