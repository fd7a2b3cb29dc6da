"""Media inputs: data: URLs and remote http(s) fetches that refuse non-public hosts (also after redirects)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import http.client
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import unquote, unquote_to_bytes, urljoin, urlsplit

from hypnos.errors import invalid_request

MAX_REDIRECTS = 5
FETCH_TIMEOUT_SECS = 30.0


@dataclass(frozen=True)
class Media:
    """Bytes of an image, audio clip or document, with the MIME type its source declared."""

    data: bytes
    mime: str | None = None


def decode_data_url(url: str, *, max_bytes: int, what: str = "image") -> Media:
    """Decode `data:[<mime>][;base64],<payload>`; 400 when malformed or above max_bytes (decoded size)."""
    header, comma, payload = url.partition(",")
    if not comma or not header.lower().startswith("data:"):
        raise invalid_request(f"the {what} is not a valid data: URL")
    params = header[5:].split(";")
    mime = params[0] or None
    if len(payload) * 3 // 4 > max_bytes + 3:
        raise invalid_request(f"the {what} is larger than the server's limit of {max_bytes} bytes")
    try:
        if "base64" in params[1:]:
            compact = "".join(unquote(payload).split())
            data = base64.b64decode(compact, validate=True)
        else:
            data = unquote_to_bytes(payload)
    except (binascii.Error, ValueError):
        raise invalid_request(f"the {what}'s data: URL is not valid base64") from None
    if len(data) > max_bytes:
        raise invalid_request(f"the {what} is larger than the server's limit of {max_bytes} bytes")
    return Media(data, mime)


def decode_base64(payload: str, *, max_bytes: int, what: str = "audio") -> bytes:
    """Plain base64 (input_audio.data); 400 when malformed or above max_bytes."""
    if len(payload) * 3 // 4 > max_bytes + 3:
        raise invalid_request(f"the {what} is larger than the server's limit of {max_bytes} bytes")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise invalid_request(f"the {what} is not valid base64") from None
    if len(data) > max_bytes:
        raise invalid_request(f"the {what} is larger than the server's limit of {max_bytes} bytes")
    return data


def is_public_address(address: str) -> bool:
    """False for loopback, private, link-local, multicast, reserved, unspecified and shared (CGNAT) addresses."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    shared = isinstance(ip, ipaddress.IPv4Address) and ip in ipaddress.ip_network("100.64.0.0/10")
    return not (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or shared
    )


def _resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise invalid_request(f"the host `{host}` could not be resolved") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to a pre-resolved address, with SNI and certificate checks for the original host name."""

    def __init__(self, address: str, port: int, host: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Plain HTTP to a pre-resolved address."""

    def __init__(self, address: str, port: int, host: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


def fetch_url_blocking(
    url: str, *, max_bytes: int, allow_private: bool, what: str = "image", timeout: float = FETCH_TIMEOUT_SECS
) -> Media:
    """GET an http(s) URL, following redirects; every hop's host must resolve to a public address
    unless allow_private, and the connection goes to the address that was checked."""
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise invalid_request(f"the {what} URL must be an http(s) URL")
        host = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = _resolve(host, port)
        usable = addresses if allow_private else [a for a in addresses if is_public_address(a)]
        if not usable:
            raise invalid_request(
                f"the {what} URL's host `{host}` resolves only to non-public addresses (limits.allow_private_urls)"
            )
        kind = _PinnedHTTPSConnection if parts.scheme == "https" else _PinnedHTTPConnection
        connection = kind(usable[0], port, host, timeout)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        try:
            connection.request("GET", path, headers={"User-Agent": "hypnos", "Accept": "*/*"})
            response = connection.getresponse()
            if response.status in (301, 302, 303, 307, 308) and response.getheader("Location"):
                url = urljoin(url, response.getheader("Location", ""))
                continue
            if response.status != 200:
                raise invalid_request(f"fetching the {what} from `{host}` answered HTTP {response.status}")
            declared = response.getheader("Content-Length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise invalid_request(f"the {what} is larger than the server's limit of {max_bytes} bytes")
            data = response.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise invalid_request(f"the {what} is larger than the server's limit of {max_bytes} bytes")
            mime = (response.getheader("Content-Type") or "").split(";")[0].strip() or None
            return Media(data, mime)
        except (OSError, http.client.HTTPException) as error:  # the error's own text is not the client's business
            raise invalid_request(f"fetching the {what} from `{host}` failed: {fetch_failure(error)}") from None
        finally:
            connection.close()
    raise invalid_request(f"fetching the {what} followed more than {MAX_REDIRECTS} redirects")


async def load_media_url(
    url: str, *, max_bytes: int, allow_remote: bool, allow_private: bool, what: str = "image"
) -> Media:
    """A data: URL decoded, or an http(s) URL fetched off the event loop when the operator allows remote URLs."""
    if url.startswith("data:"):
        return decode_data_url(url, max_bytes=max_bytes, what=what)
    if url.startswith(("http://", "https://")):
        if not allow_remote:
            raise invalid_request(
                f"remote {what} URLs are disabled on this server (limits.allow_remote_image_urls); send a data: URL"
            )
        return await asyncio.to_thread(
            fetch_url_blocking, url, max_bytes=max_bytes, allow_private=allow_private, what=what
        )
    raise invalid_request(f"the {what} URL must be a data: URL or an http(s) URL")


def fetch_failure(error: BaseException) -> str:
    """A fetch error in words a client may see (no exception text, which can carry addresses and reprs)."""
    if isinstance(error, TimeoutError):
        return "the connection timed out"
    if isinstance(error, ConnectionRefusedError):
        return "the connection was refused"
    if isinstance(error, ssl.SSLError):
        return "the TLS handshake failed"
    if isinstance(error, socket.gaierror):
        return "the host name did not resolve"
    if isinstance(error, http.client.HTTPException):
        return "the answer was not valid HTTP"
    return "the connection failed"
