"""The requests of the last minutes, for the status page's chart: per ten-second bucket, how many
ended, how many of them failed, and their 99th percentile latency.

Rules it keeps:

* Bounded: :data:`BUCKETS` buckets of :data:`BUCKET_SECONDS` (ten minutes); each keeps at most
  :data:`SAMPLE` latencies, a uniform sample of its requests past that (reservoir sampling),
  so a percentile costs the same at 10 or 10,000 requests a second.
* On the request path, :meth:`RecentCalls.record` is a clock read and an append; the percentile
  is computed only when someone asks (:meth:`RecentCalls.series`).
* The clock is monotonic; a bucket is named by the wall-clock time it began when read.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BUCKETS", "BUCKET_SECONDS", "RecentCalls"]

BUCKET_SECONDS = 10.0
BUCKETS = 60
SAMPLE = 512


@dataclass(slots=True)
class _Bucket:
    index: int
    count: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)


class RecentCalls:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: deque[_Bucket] = deque(maxlen=BUCKETS)
        self._random = random.Random()  # noqa: S311  # a sample of latencies, not a secret

    def record(self, seconds: float, failed: bool) -> None:
        """One request ended after ``seconds``; ``failed``: its answer was an error."""
        index = int(self._clock() // BUCKET_SECONDS)
        buckets = self._buckets
        if not buckets or buckets[-1].index != index:
            buckets.append(_Bucket(index))
        bucket = buckets[-1]
        bucket.count += 1
        bucket.failed += failed
        if len(bucket.latencies) < SAMPLE:
            bucket.latencies.append(seconds)
        else:
            slot = self._random.randrange(bucket.count)
            if slot < SAMPLE:
                bucket.latencies[slot] = seconds

    def series(self) -> list[dict[str, Any]]:
        """The last ten minutes, oldest first, one entry per bucket (empty buckets too):
        ``at`` (Unix time the bucket began), ``perSecond``, ``failed``, ``p99Ms`` (None when
        the bucket had no request)."""
        now = self._clock()
        current = int(now // BUCKET_SECONDS)
        wall = time.time() - now
        kept = {bucket.index: bucket for bucket in self._buckets}
        out: list[dict[str, Any]] = []
        for index in range(current - BUCKETS + 1, current + 1):
            bucket = kept.get(index)
            seconds = BUCKET_SECONDS if index < current else max(now - index * BUCKET_SECONDS,
                                                                  1.0)
            out.append({
                "at": round(wall + index * BUCKET_SECONDS, 3),
                "perSecond": round(bucket.count / seconds, 2) if bucket else 0.0,
                "failed": bucket.failed if bucket else 0,
                "p99Ms": _p99_ms(bucket.latencies) if bucket else None,
            })
        return out


def _p99_ms(latencies: list[float]) -> float | None:
    if not latencies:
        return None
    ordered = sorted(latencies)
    return round(ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)] * 1000, 2)
