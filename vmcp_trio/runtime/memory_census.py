"""What the process's memory holds, written to the log when asked (``kill -USR1``): the first
look at a memory that grows.

Rules it keeps:

* Always: the object types with the most live objects (from the garbage collector's lists),
  and how each changed since the previous census of this process, so two censuses some minutes
  apart show what accumulates. What ``vmcp serve`` had made when it started is frozen out of
  those lists (:func:`~vmcp_trio.app.running.settle_garbage_collection`): a census counts what
  was made since, which is where a leak is.
* With allocation tracing on (``PYTHONTRACEMALLOC=25`` in the environment, or ``python -X
  tracemalloc=25``), also the source lines holding the most memory and their growth since the
  previous census. Tracing costs CPU on every allocation; it is never turned on here.
* Also the resident size, before and after returning the free memory to the system
  (:func:`~.memory_trim.trim`): a size that falls back is memory a burst left free, not a leak.
* A census blocks the process while it counts (about a tenth of a second per hundred
  megabytes of objects): it is taken when asked, never on a schedule. It writes no value of any
  object, only type names, counts, sizes and source lines.
"""

from __future__ import annotations

import gc
import logging
import tracemalloc
from collections import Counter

from .memory_trim import trim

__all__ = ["MemoryCensus"]

log = logging.getLogger("vmcp.memory")

TOP = 25


class MemoryCensus:
    def __init__(self) -> None:
        self._types: Counter[str] | None = None
        self._snapshot: tracemalloc.Snapshot | None = None

    def lines(self) -> list[str]:
        """The census, one line per entry."""
        gc.collect()
        types = Counter(type(item).__qualname__ for item in gc.get_objects())
        out = [f"memory census: {sum(types.values()):,} objects tracked by the collector "
               f"(and {gc.get_freeze_count():,} frozen at start, not counted)"]
        for name, count in types.most_common(TOP):
            change = "" if self._types is None else f" ({count - self._types[name]:+,})"
            out.append(f"  {count:>10,} {name}{change}")
        if self._types is not None:
            grown = [(count - self._types[name], name) for name, count in types.items()
                     if count > self._types[name]]
            for growth, name in sorted(grown, reverse=True)[:10]:
                out.append(f"  grew {growth:+,} {name}")
        self._types = types
        before, after = trim() or (None, None)
        if before is not None and after is not None:
            out.append(f"  resident: {before / 2**20:,.1f} MiB, {after / 2**20:,.1f} MiB once "
                       "the free memory was returned to the system (malloc_trim)")
        if tracemalloc.is_tracing():
            traced, _ = tracemalloc.get_traced_memory()
            tracing = tracemalloc.get_tracemalloc_memory()
            out.append(f"  traced: {traced / 2**20:,.1f} MiB held by Python allocations now "
                       f"(tracing itself holds {tracing / 2**20:,.1f} MiB)")
            snapshot = tracemalloc.take_snapshot()
            if self._snapshot is None:
                out += [f"  traced {stat}" for stat in snapshot.statistics("lineno")[:TOP]]
            else:
                out += [f"  traced {stat}"
                        for stat in snapshot.compare_to(self._snapshot, "lineno")[:TOP]]
            self._snapshot = snapshot
        else:
            out.append("  (allocation tracing is off: start with PYTHONTRACEMALLOC=25 for the "
                       "source lines holding memory)")
        return out

    def log(self) -> None:
        for line in self.lines():
            log.warning("%s", line)
