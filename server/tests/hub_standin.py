"""A stand-in Hugging Face hub on loopback: `resolve` URLs with HEAD, Range, gated repos and cut connections."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Hub:
    """What the stand-in serves and what it was asked."""

    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    cut_once: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    url: str = ""


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _target(self) -> tuple[str, str] | None:
            parts = self.path.split("?")[0].strip("/").split("/")
            if len(parts) >= 5 and parts[2] == "resolve":
                return "/".join(parts[:2]), "/".join(parts[4:])
            if len(parts) >= 2:  # an https:// base URL: /<base>/<file>
                return parts[0], "/".join(parts[1:])
            return None

        def _api(self) -> bool:
            """The two API calls snapshot_download makes: revision info and the recursive tree."""
            parts = self.path.split("?")[0].strip("/").split("/")
            if parts[:2] != ["api", "models"] or len(parts) < 6:
                return False
            repo = "/".join(parts[2:4])
            files = sorted((name, data) for (owner, name), data in hub.files.items() if owner == repo)
            if parts[4] == "revision":
                answer = {"id": repo, "sha": "0" * 40, "siblings": [{"rfilename": name} for name, _ in files]}
            else:
                answer = [{"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                          for name, data in files]  # fmt: skip
            payload = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return True

        def _answer(self, body: bool) -> None:
            hub.requests.append((self.command, self.path, self.headers.get("Range")))
            if self._api():
                return
            target = self._target()
            if target is not None and target[0] in hub.gated:
                self.send_response(401)
                self.send_header("X-Error-Code", "GatedRepo")
                self.send_header("X-Error-Message", "Access to this model is restricted")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = hub.files.get(target) if target is not None else None
            if data is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start = 0
            ranged = self.headers.get("Range")
            if ranged and ranged.startswith("bytes="):
                start = int(ranged[6:].split("-")[0] or 0)
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", "0" * 40)
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(data) - start))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if not body:
                return
            if target[1] in hub.cut_once:
                hub.cut_once.discard(target[1])
                self.wfile.write(data[start : start + (len(data) - start) // 2])
                self.wfile.flush()
                time.sleep(0.3)  # the client reads the first half before the connection drops
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.wfile.write(data[start:])

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

    return Handler


@contextmanager
def stand_in_hub() -> Iterator[Hub]:
    """Serve a Hub on 127.0.0.1 for the duration of the block."""
    hub = Hub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
