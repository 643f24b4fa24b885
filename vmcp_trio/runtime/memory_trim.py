"""Giving memory the process freed back to the system (glibc's ``malloc_trim``).

A burst of requests allocates buffers (request bodies, encoded replies, stream events) that are
freed when it passes, but glibc's allocator keeps the freed pages in its heaps, so the resident
size stays at the burst's high-water mark and, with fragmentation, creeps up burst after burst
although nothing is held. ``malloc_trim(0)`` returns every free page to the system.

Rules it keeps:

* glibc only (found with :mod:`ctypes` at import); elsewhere :func:`trim` does nothing and says
  so (None).
* :func:`trim_forever` (a supervised task of ``vmcp serve``) trims every :data:`TRIM_EVERY`
  seconds, in a worker thread: a trim of hundreds of megabytes takes tens of milliseconds,
  which the event loop does not wait for.
* The resident size is read from ``/proc/self/statm`` (Linux); :func:`trim` returns it before
  and after, for the memory census.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable

import trio

__all__ = ["TRIM_EVERY", "resident_bytes", "trim", "trim_forever"]

TRIM_EVERY = 60.0


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    trim_heap: Callable[[int], int] = function
    return trim_heap


_MALLOC_TRIM = _malloc_trim()


def resident_bytes() -> int | None:
    """The process's resident size, or None where ``/proc`` does not say it."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def trim() -> tuple[int | None, int | None] | None:
    """Return the free pages to the system: the resident size before and after, or None
    when this is not glibc."""
    if _MALLOC_TRIM is None:
        return None
    before = resident_bytes()
    _MALLOC_TRIM(0)
    return before, resident_bytes()


async def trim_forever() -> None:
    """Trim every :data:`TRIM_EVERY` seconds (returns at once where there is no glibc)."""
    if _MALLOC_TRIM is None:
        return
    while True:
        await trio.sleep(TRIM_EVERY)
        await trio.to_thread.run_sync(trim)  # ctypes lets go of the GIL: the loop runs on
