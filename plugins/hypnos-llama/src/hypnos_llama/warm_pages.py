"""Tier 2 for GGUF: keep a model file's pages resident in host RAM (mapped, populated, optionally locked)."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
import time
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


class WarmPages:
    """Holds a file's pages in RAM so that loading it (mmap or read) does not touch the disk."""

    def __init__(self, path: Path, *, lock: bool = False) -> None:
        self.path = Path(path)
        self.lock = lock
        self.locked = False
        self.size = 0
        self._address: int | None = None
        self._libc: ctypes.CDLL | None = None

    @property
    def held(self) -> bool:
        """True while the pages are held."""
        return self._address is not None or (self.size > 0 and not sys.platform.startswith("linux"))

    def acquire(self) -> float:
        """Map and populate the file (locking it when asked and allowed); returns the milliseconds it took."""
        if self.held:
            return 0.0
        started = time.perf_counter()
        self.size = self.path.stat().st_size
        if sys.platform.startswith("linux") and self.size:
            self._map_linux()
        else:  # elsewhere, reading the file once leaves it in the page cache
            with self.path.open("rb") as handle:
                while handle.read(16 * 1024 * 1024):
                    pass
        return (time.perf_counter() - started) * 1000

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
        """Unmap (and unlock) the pages; the kernel may then drop them."""
        if self._address is not None and self._libc is not None:
            if self.locked:
                self._libc.munlock(self._address, self.size)
            self._libc.munmap(self._address, self.size)
        self._address = None
        self.locked = False
        self.size = 0
