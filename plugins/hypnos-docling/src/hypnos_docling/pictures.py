"""The picture store: pictures of converted documents, kept until their TTL or a delete, oldest out when full."""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hypnos.errors import not_found

from hypnos_docling.events import Picture

GiB = 1024**3
STORE_KEY = "hypnos_docling_pictures"


@dataclass
class StoredDocument:
    """One document's pictures (1-based in markdown order), when they expire (wall clock) and the key that owns them."""

    id: str
    expires_at: float
    pictures: list[Picture]
    owner: str | None = None

    @property
    def bytes(self) -> int:
        """The image bytes held."""
        return sum(len(picture.png or b"") for picture in self.pictures)


def iso(timestamp: float) -> str:
    """A UTC timestamp as 2026-10-30T19:42:11Z."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PictureStore:
    """Documents' pictures in memory, by document id; expired ones and, above max_bytes, the oldest go first."""

    def __init__(self, ttl_secs: float, max_bytes: int = GiB, clock: Any = time.time) -> None:
        self.ttl_secs = ttl_secs
        self.max_bytes = max_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._documents: OrderedDict[str, StoredDocument] = OrderedDict()

    def open(self, owner: str | None = None) -> StoredDocument:
        """A new, empty document entry of the key `owner` (pictures are added as its pages arrive)."""
        document = StoredDocument("doc-" + secrets.token_hex(12), self._clock() + self.ttl_secs, [], owner)
        with self._lock:
            self._documents[document.id] = document
        return document

    def add(self, document: StoredDocument, pictures: list[Picture]) -> list[int]:
        """Append pictures to a document; their 1-based indexes. Makes room by dropping the oldest documents."""
        with self._lock:
            first = len(document.pictures) + 1
            document.pictures.extend(pictures)
            self._evict(keep=document.id)
        return list(range(first, first + len(pictures)))

    def _evict(self, keep: str) -> None:
        now = self._clock()
        for key in [key for key, doc in self._documents.items() if doc.expires_at <= now]:
            del self._documents[key]
        total = sum(doc.bytes for doc in self._documents.values())
        for key in list(self._documents):
            if total <= self.max_bytes:
                break
            if key != keep:
                total -= self._documents.pop(key).bytes

    def get(self, document_id: str, owner: str | None = None) -> StoredDocument:
        """The live document of the key `owner`, or 404 not_found (unknown, expired, deleted or another key's)."""
        with self._lock:
            document = self._documents.get(document_id)
            if document is not None and document.expires_at <= self._clock():
                del self._documents[document_id]
                document = None
        if document is None or document.owner != owner:
            raise not_found(f"No stored pictures for document `{document_id}` (unknown, expired or deleted)")
        return document

    def picture(self, document_id: str, index: int, owner: str | None = None) -> Picture:
        """One picture by its 1-based index, or 404."""
        document = self.get(document_id, owner)
        if not 1 <= index <= len(document.pictures):
            raise not_found(f"Document `{document_id}` has no picture {index}")
        return document.pictures[index - 1]

    def delete(self, document_id: str, owner: str | None = None) -> None:
        """Release a document's pictures, or 404."""
        self.get(document_id, owner)
        with self._lock:
            self._documents.pop(document_id, None)


def picture_record(document: StoredDocument, index: int, with_image: bool) -> dict[str, Any]:
    """The spec's picture record (section 12); `image` (base64) only when asked."""
    import base64

    picture = document.pictures[index - 1]
    url = f"/v1/documents/{document.id}/pictures/{index}"
    record: dict[str, Any] = {
        "object": "document.picture", "document_id": document.id, "index": index, "page": picture.page,
        "url": url, "mime": "image/png", "bytes": len(picture.png or b""), "width": picture.width,
        "height": picture.height, "dpi": picture.dpi, "bbox": picture.bbox, "page_size": picture.page_size,
    }  # fmt: skip
    if picture.caption:
        record["caption"] = picture.caption
    if picture.ref:
        record["ref"] = picture.ref
    if with_image:
        record["image"] = base64.b64encode(picture.png or b"").decode("ascii")
    return record
