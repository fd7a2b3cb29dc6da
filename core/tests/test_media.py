"""Media inputs: data: URLs, and remote fetches that refuse non-public hosts, also after a redirect."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypnos import media
from hypnos.errors import HypnosError
from hypnos.media import decode_base64, decode_data_url, is_public_address, load_media_url

PNG = b"\x89PNG\r\n\x1a\n" + b"x" * 100


class _Handler(BaseHTTPRequestHandler):
    redirect_to: str = ""

    def do_GET(self) -> None:
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", self.server.redirect_to)  # type: ignore[attr-defined]
            self.end_headers()
            return
        if self.path.startswith("/missing"):
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(PNG)))
        self.end_headers()
        self.wfile.write(PNG)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[tuple[str, str]]:
    """An image server on 127.0.0.1 and a redirecting one on 127.0.0.2 (both loopback)."""
    image = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    redirector = ThreadingHTTPServer(("127.0.0.2", 0), _Handler)
    image_base = f"http://127.0.0.1:{image.server_address[1]}"
    redirector.redirect_to = f"{image_base}/image.png"  # type: ignore[attr-defined]
    for server in (image, redirector):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield image_base, f"http://127.0.0.2:{redirector.server_address[1]}"
    for server in (image, redirector):
        server.shutdown()
        server.server_close()


def test_data_url_decodes_with_its_mime_type() -> None:
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    decoded = decode_data_url(url, max_bytes=1000)
    assert decoded.data == PNG and decoded.mime == "image/png"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("data:image/png;base64,@@@@", "not valid base64"),
        ("data:image/png;base64", "not a valid data: URL"),
        ("data:image/png;base64," + base64.b64encode(b"y" * 2000).decode(), "limit of 1000 bytes"),
    ],
)
def test_bad_data_urls_are_400(url: str, message: str) -> None:
    with pytest.raises(HypnosError) as caught:
        decode_data_url(url, max_bytes=1000)
    assert caught.value.status == 400 and message in caught.value.message


def test_plain_base64_audio_limits() -> None:
    assert decode_base64(base64.b64encode(b"RIFF").decode(), max_bytes=10) == b"RIFF"
    with pytest.raises(HypnosError, match="larger than"):
        decode_base64(base64.b64encode(b"R" * 40).decode(), max_bytes=10)


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700::1111", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("0.0.0.0", False),
        ("::1", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("::ffff:127.0.0.1", False),
        ("224.0.0.1", False),
    ],
)
def test_public_address_table(address: str, public: bool) -> None:
    assert is_public_address(address) is public


async def test_remote_fetch_when_private_hosts_are_allowed(servers) -> None:
    image_base, _ = servers
    fetched = await load_media_url(f"{image_base}/a.png", max_bytes=1000, allow_remote=True, allow_private=True)
    assert fetched.data == PNG and fetched.mime == "image/png"


async def test_loopback_host_is_refused_naming_it(servers) -> None:
    image_base, _ = servers
    with pytest.raises(HypnosError) as caught:
        await load_media_url(f"{image_base}/a.png", max_bytes=1000, allow_remote=True, allow_private=False)
    assert caught.value.status == 400 and "`127.0.0.1`" in caught.value.message


async def test_redirect_to_a_private_host_is_refused(servers, monkeypatch) -> None:
    """127.0.0.2 plays a public host; its redirect to 127.0.0.1 must be refused."""
    _, redirector = servers
    monkeypatch.setattr(media, "is_public_address", lambda address: address == "127.0.0.2")
    with pytest.raises(HypnosError) as caught:
        await load_media_url(f"{redirector}/redirect", max_bytes=1000, allow_remote=True, allow_private=False)
    assert caught.value.status == 400 and "`127.0.0.1`" in caught.value.message
    followed = await load_media_url(f"{redirector}/redirect", max_bytes=1000, allow_remote=True, allow_private=True)
    assert followed.data == PNG


async def test_remote_urls_off_and_size_and_status_errors(servers) -> None:
    image_base, _ = servers
    with pytest.raises(HypnosError, match="allow_remote_image_urls"):
        await load_media_url(f"{image_base}/a.png", max_bytes=1000, allow_remote=False, allow_private=True)
    with pytest.raises(HypnosError, match="limit of 10 bytes"):
        await load_media_url(f"{image_base}/a.png", max_bytes=10, allow_remote=True, allow_private=True)
    with pytest.raises(HypnosError, match="HTTP 404"):
        await load_media_url(f"{image_base}/missing", max_bytes=1000, allow_remote=True, allow_private=True)
    with pytest.raises(HypnosError, match="data: URL or an http"):
        await load_media_url("ftp://example.com/x.png", max_bytes=1000, allow_remote=True, allow_private=True)
