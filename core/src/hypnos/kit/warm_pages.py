"""Tier 2 for file-backed engines: keep model files' pages resident in host RAM (mapped, populated, maybe locked)."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

_PROT_READ = 0x1
_MAP_SHARED = 0x01
_MAP_POPULATE = 0x8000
_MADV_WILLNEED = 3
_MAP_FAILED = ctypes.c_void_p(-1).value


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


class _FilePages:
    """One file's pages held in RAM (mapped and populated on Linux, read once elsewhere)."""

    def __init__(self, path: Path, lock: bool) -> None:
        self.path = path
        self.lock = lock
        self.locked = False
        self.size = 0
        self._address: int | None = None
        self._libc: ctypes.CDLL | None = None

    def hold(self) -> None:
        self.size = self.path.stat().st_size
        if sys.platform.startswith("linux") and self.size:
            self._map_linux()
        else:  # elsewhere, reading the file once leaves it in the page cache
            with self.path.open("rb") as handle:
                while handle.read(16 * 1024 * 1024):
                    pass

    def _map_linux(self) -> None:
        libc = self._libc = _libc()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            address = libc.mmap(None, self.size, _PROT_READ, _MAP_SHARED | _MAP_POPULATE, fd, 0)
        finally:
            os.close(fd)
        if address in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap of {self.path} failed")
        self._address = address
        libc.madvise(address, self.size, _MADV_WILLNEED)
        if self.lock:
            self.locked = libc.mlock(address, self.size) == 0
            if not self.locked:
                logger.info("could not lock %s in RAM (errno %d); pages stay mapped", self.path, ctypes.get_errno())

    def release(self) -> None:
        if self._address is not None and self._libc is not None:
            if self.locked:
                self._libc.munlock(self._address, self.size)
            self._libc.munmap(self._address, self.size)
        self._address = None
        self.locked = False
        self.size = 0


class WarmPages:
    """Holds files' pages in RAM (tier 2 of file-backed engines) so that loading them does not touch the disk."""

    def __init__(self, paths: Path | str | Iterable[Path | str], *, lock: bool = False) -> None:
        listed = [paths] if isinstance(paths, (str, Path)) else list(paths)
        self.paths = [Path(p) for p in listed]
        self.lock = lock
        self._files: list[_FilePages] = []

    @property
    def held(self) -> bool:
        """True while the pages are held."""
        return bool(self._files)

    @property
    def bytes_held(self) -> int:
        """The bytes of the files held (0 when released)."""
        return sum(f.size for f in self._files)

    @property
    def locked(self) -> bool:
        """True when every held file is also locked (mlock) in RAM."""
        return bool(self._files) and all(f.locked for f in self._files)

    def hold(self) -> float:
        """Map and populate every file (locking them when asked and allowed); the milliseconds it took.

        Idempotent: holding held pages costs nothing. A file that cannot be held releases the others and raises.
        """
        if self._files:
            return 0.0
        started = time.perf_counter()
        try:
            for path in self.paths:
                pages = _FilePages(path, self.lock)
                self._files.append(pages)
                pages.hold()
        except BaseException:
            self.release()
            raise
        return (time.perf_counter() - started) * 1000

    def release(self) -> None:
        """Unmap (and unlock) the pages; the kernel may then drop them."""
        files, self._files = self._files, []
        for pages in files:
            pages.release()
