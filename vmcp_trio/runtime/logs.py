"""What the process writes: structured log lines (JSON or text), operator messages, and one
access record per HTTP request.

Rules kept here:

* With ``--log-format json`` every line the process writes is one JSON object: log records
  (a traceback is their ``exc`` field), the operator's messages of :func:`say` (the banner, the
  validation problems, the shutdown lines), Python warnings, the access records. In text, log
  records carry a timestamp, level and logger, and :func:`say` prints the message as it is.
* This is the one place logging is set up (:func:`configure_logging`, from the flags of
  :mod:`.log_levels`): ``--log-level`` is the least severe record written, and above ``info``
  the access records are dropped too; the operator's messages of :func:`say` are always written.
* Every line logged while serving an HTTP request carries its request id (a context variable
  set by the HTTP layer, inherited by the tasks the request starts), without it being passed
  around.
* The access record of a request is filled in along the way (:func:`note`: the caller's
  subject, the session, the JSON-RPC method, the tool, the backend) and written once the
  response is done: method, path without its query, status, duration (in batches, every half
  second: :func:`write_access_log`). Secrets never reach the log: no header, query string or
  body is written, only names and ids.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import logging
import secrets
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

import trio

__all__ = ["ACCESS", "REQUEST_ID", "AccessRecord", "adopt_request_id", "configure_logging",
           "log_access", "note", "say", "write_access_log"]

REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id",
                                                                        default=None)

_json = False
"""The configured format: JSON lines (else text)."""
_access_records = True
"""Whether access records are written (the configured level is ``info`` or more verbose)."""


@dataclass(slots=True)
class AccessRecord:
    """What the layers of a request learn about it, for its access record."""

    subject: str | None = None
    address: str | None = None
    """The client's address (for the audit log; the access record has it from the server)."""
    user_agent: str | None = None
    session: str | None = None
    rpc: str | None = None
    tool: str | None = None
    backend: str | None = None


ACCESS: contextvars.ContextVar[AccessRecord | None] = contextvars.ContextVar("access",
                                                                            default=None)


_ID_PREFIX = secrets.token_hex(4)
_ID_NUMBERS = itertools.count(secrets.randbelow(1 << 32))


def adopt_request_id(given: str | None) -> None:
    """Set this request's id: the caller's ``X-Request-Id`` when it is a sane token (a load
    balancer's), else a new one. Every log line of the request carries it.

    A new id is this process's random prefix and a counter (16 hex digits): distinct from the
    other replicas' with near certainty, and not a secret (a client is told its id), so no
    random bytes are drawn for it (the ``getrandom`` call cost 1-3 us a request under load)."""
    if not (given and len(given) <= 64 and all(c.isalnum() or c in "-_.:" for c in given)):
        given = f"{_ID_PREFIX}{next(_ID_NUMBERS) & 0xFFFFFFFF:08x}"
    REQUEST_ID.set(given)


def note(**fields: str | None) -> None:
    """Add to the access record of the HTTP request being served (if any)."""
    record = ACCESS.get()
    if record is not None:
        for name, value in fields.items():
            setattr(record, name, value)


def _timestamp(created: float) -> str:
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
            + f".{int(created % 1 * 1000):03d}Z")


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = REQUEST_ID.get()
        if request_id:
            entry["request_id"] = request_id
        fields = getattr(record, "fields", None)
        if fields:
            entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class _TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        request_id = REQUEST_ID.get()
        return f"{text} [req {request_id}]" if request_id else text


def configure_logging(fmt: str = "text", *, level: str = "info") -> None:
    """Set up the process's logging: ``fmt`` ``text`` or ``json``, and the least severe
    ``level`` written (``debug``, ``info``, ``warning``, ``error``: the flags of
    :mod:`.log_levels`). Above ``info`` the access records are not written either; the
    operator's messages of :func:`say` always are."""
    global _json, _access_records
    _json = fmt == "json"
    _access_records = logging.getLevelName(level.upper()) <= logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if _json else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.captureWarnings(True)  # Python warnings are log records too
    for noisy in ("hypercorn.access",):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def say(text: str, *, level: str = "info", stream: TextIO | None = None,
        **fields: Any) -> None:
    """An operator's message (the banner, a problem, the shutdown): the text as it is, or one
    JSON object (with ``fields``) in JSON mode; on stderr unless ``stream`` says otherwise."""
    out = stream if stream is not None else sys.stderr
    if _json:
        entry = {"ts": _timestamp(time.time()), "level": level, "logger": "vmcp",
                 **fields, "msg": text}
        out.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
    else:
        out.write(text + "\n")
    out.flush()


class _AccessLog:
    """Access records, written in batches: a line per request through the logging machinery
    cost ~17 µs of the gateway's ~500 µs per call; formatted here and written every half
    second (:func:`flush_access_log`, a supervised task) or every 256 lines, ~3 µs."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._second = -1
        self._stamps = ("", "")

    def stamp(self, now: float) -> str:
        """The time as the other lines show it (JSON: UTC ISO 8601; text: logging's)."""
        second = int(now)
        if second != self._second:
            self._second = second
            self._stamps = (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)),
                            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)))
        millis = int(now % 1 * 1000)
        return (f"{self._stamps[0]}.{millis:03d}Z" if _json
                else f"{self._stamps[1]},{millis:03d}")

    def write(self, line: str) -> None:
        self.lines.append(line)
        if len(self.lines) >= 256:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            text = "".join(self.lines)
            self.lines.clear()
            sys.stderr.write(text)
            sys.stderr.flush()


_access = _AccessLog()


def log_access(method: str, path: str, status: int, seconds: float,
               record: AccessRecord) -> None:
    """The access record of one HTTP request (path without its query string). A request that
    got no response (its client left first) has none: it is counted in the metrics."""
    if not status or not _access_records:
        return
    now = time.time()
    duration_ms = round(seconds * 1000, 2)
    fields = {"subject": record.subject, "session": record.session, "rpc": record.rpc,
              "tool": record.tool, "backend": record.backend}
    request_id = REQUEST_ID.get()
    if _json:
        entry: dict[str, Any] = {"ts": _access.stamp(now), "level": "info",
                                 "logger": "vmcp.access", "msg": f"{method} {path} {status}"}
        if request_id:
            entry["request_id"] = request_id
        entry.update(method=method, path=path, status=status, duration_ms=duration_ms)
        entry.update((k, v) for k, v in fields.items() if v is not None)
        _access.write(json.dumps(entry, ensure_ascii=False) + "\n")
        return
    extra = "".join(f" {k}={v}" for k, v in fields.items() if v is not None)
    req = f" [req {request_id}]" if request_id else ""
    _access.write(f"{_access.stamp(now)} INFO    vmcp.access: {method} {path} {status} "
                  f"{duration_ms:.1f}ms{extra}{req}\n")


async def write_access_log(*, period: float = 0.5) -> None:
    """Write the access records every ``period`` seconds (a supervised task), and at the end."""
    try:
        while True:
            await trio.sleep(period)
            _access.flush()
    finally:
        _access.flush()
