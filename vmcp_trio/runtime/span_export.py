"""Where finished spans go: a bounded queue, batches, and a thread that exports them.

Rules it keeps:

* **The request path only appends.** :meth:`BatchExport.add` puts a finished span on a deque
  (thread-safe); encoding and sending happen in the export thread.
* **Bounded.** At most ``OTEL_BSP_MAX_QUEUE_SIZE`` spans (2048) wait; past it a span is dropped
  and counted (:attr:`BatchExport.dropped`, logged once a minute at most), never waited for.
* **Batches** of at most ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` (512) go when that many wait or every
  ``OTEL_BSP_SCHEDULE_DELAY`` milliseconds (5000); :meth:`BatchExport.shutdown` sends what waits,
  each batch tried once, and stops the thread within ``OTEL_BSP_EXPORT_TIMEOUT`` (30000 ms) and
  never more than :data:`SHUTDOWN_LIMIT`: a collector that is down does not hold an exit (a
  pod's grace period is short).
* **OTLP over HTTP** (:class:`OtlpHttp`): ``POST`` of protobuf (:mod:`.otlp_encoding`) to
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/traces``
  (default ``http://localhost:4318/v1/traces``), with the ``..._HEADERS`` (``k=v,...``,
  values percent-decoded), ``..._TIMEOUT`` (ms, 10000), ``..._COMPRESSION`` (``gzip``),
  ``..._CERTIFICATE`` (a CA file), ``..._CLIENT_CERTIFICATE``/``..._CLIENT_KEY`` (mutual TLS),
  each under its ``OTEL_EXPORTER_OTLP_TRACES_*`` name first. 429, 502, 503 and 504 are retried
  with backoff within the timeout; a batch that cannot be sent is dropped, logged once a minute
  at most, never with the headers' values or a password the URL holds.
* **Console** (:class:`Console`): one JSON object per span and line on stdout (for trying traces
  out, not for volume).
* A setting that cannot be read is :class:`ExportSettingError` (one line naming the variable).
"""

from __future__ import annotations

import gzip
import http.client
import json
import logging
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import unquote, urlsplit

from .otlp_encoding import SPAN_KIND_SERVER, FinishedSpan, export_request

__all__ = ["BatchExport", "Console", "ExportSettingError", "OtlpHttp", "exporters", "pairs",
           "shown"]

log = logging.getLogger("vmcp.traces")

_RETRIED = frozenset({429, 502, 503, 504})
SHUTDOWN_LIMIT = 5.0
"""Seconds an exit waits at most for the spans still queued to go."""
_COMPLAIN_EVERY = 60.0


class ExportSettingError(Exception):
    """An ``OTEL_*`` setting that cannot be used (the message names it)."""


def _setting(environ: Mapping[str, str], name: str) -> str | None:
    """``OTEL_EXPORTER_OTLP_TRACES_<name>``, else ``OTEL_EXPORTER_OTLP_<name>``."""
    return (environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}")
            or environ.get(f"OTEL_EXPORTER_OTLP_{name}") or None)


def _number(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ExportSettingError(f"{name}: {raw[:40]!r} is not a whole number") from None
    if value <= 0:
        raise ExportSettingError(f"{name}: must be above 0")
    return value


def pairs(raw: str, name: str) -> dict[str, str]:
    """``k=v,k2=v2`` (values percent-decoded), as the OpenTelemetry variables write lists."""
    out: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ExportSettingError(f"{name}: {key.strip()[:40]!r} has no '=value'")
        out[key.strip()] = unquote(value.strip())
    return out


def shown(url: str) -> str:
    """A URL as logs may show it: without a user or password in it."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url[:200]
    netloc = parts.hostname or ""
    netloc = f"[{netloc}]" if ":" in netloc else netloc
    if parts.port is not None:
        netloc += f":{parts.port}"
    return parts._replace(netloc=netloc).geturl()[:200]


def _complainer() -> Callable[[str], None]:
    """A warning logger that says something once a minute at most."""
    last = [-_COMPLAIN_EVERY]

    def complain(message: str) -> None:
        now = time.monotonic()
        if now - last[0] >= _COMPLAIN_EVERY:
            last[0] = now
            log.warning(message)
    return complain


class OtlpHttp:
    """Sends batches to an OTLP/HTTP collector (see the module)."""

    def __init__(self, environ: Mapping[str, str], resource: Mapping[str, str],
                 scope: tuple[str, str]) -> None:
        traces_endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        self.url = (traces_endpoint or (base.rstrip("/") + "/v1/traces" if base
                                        else "http://localhost:4318/v1/traces"))
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ExportSettingError(f"OTEL_EXPORTER_OTLP_ENDPOINT: {shown(self.url)[:80]!r} "
                                     "is not an http(s) URL")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = pairs(_setting(environ, "HEADERS") or "", "OTEL_EXPORTER_OTLP_HEADERS")
        self._headers["content-type"] = "application/x-protobuf"
        self._timeout = _number(environ, "OTEL_EXPORTER_OTLP_TIMEOUT", 10_000) / 1000
        compression = (_setting(environ, "COMPRESSION") or "none").strip().lower()
        if compression not in ("gzip", "none"):
            raise ExportSettingError(f"OTEL_EXPORTER_OTLP_COMPRESSION: {compression[:20]!r} "
                                     "is not supported (gzip or none)")
        self._gzip = compression == "gzip"
        if self._gzip:
            self._headers["content-encoding"] = "gzip"
        self._tls = self._tls_context(environ) if self._https else None
        self._resource = dict(resource)
        self._scope = scope
        self._connection: http.client.HTTPConnection | None = None
        self._complain = _complainer()

    @staticmethod
    def _tls_context(environ: Mapping[str, str]) -> ssl.SSLContext:
        try:
            context = ssl.create_default_context(cafile=_setting(environ, "CERTIFICATE"))
            certificate = _setting(environ, "CLIENT_CERTIFICATE")
            if certificate is not None:
                context.load_cert_chain(certificate, _setting(environ, "CLIENT_KEY"))
        except (OSError, ssl.SSLError) as exc:
            raise ExportSettingError(f"OTEL_EXPORTER_OTLP_CERTIFICATE: cannot be loaded: "
                                     f"{exc}") from None
        return context

    def export(self, spans: Sequence[FinishedSpan], *, retry: bool = True) -> None:
        body = export_request(spans, self._resource, self._scope)
        if self._gzip:
            body = gzip.compress(body)
        deadline = time.monotonic() + self._timeout
        delay = 0.5
        while True:
            status = self._post(body)
            if status is not None and 200 <= status < 300:
                return
            if (status is not None and status not in _RETRIED) or not retry or \
                    time.monotonic() + delay >= deadline:
                self._complain(f"traces: {len(spans)} span(s) could not be exported to "
                               f"{shown(self.url)} "
                               f"({f'HTTP {status}' if status else 'no answer'})")
                return
            time.sleep(delay)
            delay *= 2

    def _post(self, body: bytes) -> int | None:
        """The collector's status, or None when it could not be reached."""
        for attempt in (1, 2):  # a kept connection the collector closed: once more, anew
            connection = self._connection or self._connect()
            try:
                connection.request("POST", self._path, body, self._headers)
                response = connection.getresponse()
                response.read(1 << 20)
                if response.will_close:
                    self._close()
                return response.status
            except (OSError, http.client.HTTPException):
                self._close()
                if attempt == 2:
                    return None
        return None

    def _connect(self) -> http.client.HTTPConnection:
        if self._https:
            self._connection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._timeout, context=self._tls)
        else:
            self._connection = http.client.HTTPConnection(self._host, self._port,
                                                          timeout=self._timeout)
        return self._connection

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class Console:
    """Writes each span as one JSON line on stdout."""

    def __init__(self, resource: Mapping[str, str], scope: tuple[str, str]) -> None:
        self._resource = dict(resource)
        self._scope = scope[0]

    def export(self, spans: Sequence[FinishedSpan], *, retry: bool = True) -> None:
        lines = []
        for span in spans:
            lines.append(json.dumps({
                "name": span.name, "kind": "SERVER" if span.kind == SPAN_KIND_SERVER
                else "CLIENT", "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                "parent_id": span.parent_id.hex() or None,
                "start_time_unix_nano": span.start, "end_time_unix_nano": span.end,
                "attributes": dict(span.attributes),
                "status": {"code": "ERROR", "message": span.error[1]} if span.error
                else {"code": "UNSET"},
                "scope": self._scope, "resource": self._resource,
            }))
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()


class BatchExport:
    """The queue and the export thread (see the module)."""

    def __init__(self, sinks: Sequence[OtlpHttp | Console], environ: Mapping[str, str]
                 ) -> None:
        self._sinks = list(sinks)
        self._max_queue = _number(environ, "OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self._batch = min(_number(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
                          self._max_queue)
        self._delay = _number(environ, "OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self._shutdown_within = _number(environ, "OTEL_BSP_EXPORT_TIMEOUT", 30_000) / 1000
        self._queue: deque[FinishedSpan] = deque()
        self.dropped = 0
        self._wake = threading.Event()
        self._stopping = False
        self._complain = _complainer()
        self._thread = threading.Thread(target=self._run, name="vmcp trace export",
                                        daemon=True)
        self._thread.start()

    def add(self, span: FinishedSpan) -> None:
        queue = self._queue
        if len(queue) >= self._max_queue:
            self.dropped += 1
            self._complain(f"traces: the export queue is full ({self._max_queue} spans): "
                           f"{self.dropped} span(s) dropped so far")
            return
        queue.append(span)
        if len(queue) == self._batch:
            self._wake.set()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._delay)
            self._wake.clear()
            self._send_waiting()
        self._send_waiting()

    def _send_waiting(self) -> None:
        while self._queue:
            batch = [self._queue.popleft()
                     for _ in range(min(self._batch, len(self._queue)))]
            for sink in self._sinks:
                try:
                    sink.export(batch, retry=not self._stopping)
                except Exception as exc:  # an exporter's fault loses its batch, nothing more
                    self._complain(f"traces: exporting failed: {exc!r}"[:300])
            if len(self._queue) < self._batch and not self._stopping:
                return

    def shutdown(self) -> None:
        """Send what waits and stop (see the module)."""
        self._stopping = True
        self._wake.set()
        self._thread.join(min(self._shutdown_within, SHUTDOWN_LIMIT))


def exporters(names: Sequence[str], environ: Mapping[str, str], resource: Mapping[str, str],
              scope: tuple[str, str]) -> list[OtlpHttp | Console]:
    """The sinks ``OTEL_TRACES_EXPORTER`` names (``otlp``, ``console``)."""
    return [OtlpHttp(environ, resource, scope) if name == "otlp" else Console(resource, scope)
            for name in names]
