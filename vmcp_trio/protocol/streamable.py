"""The rules of the Streamable HTTP transport, for both sides, with no I/O.

One MCP endpoint takes POST (a JSON-RPC message), GET (a stream of what the server sends unasked,
or the rest of a broken stream) and DELETE (the end of a session). Every rule here is a function
or a small class that takes parsed values (a status, a media type, header values) and returns a
decision; the gateway's backend links, the stdio bridge and the gateway's own ``/mcp`` drive them
(spec: 2025-11-25 basic/transports; 2026-07-28 transports/streamable-http).

The client's requests (:func:`post_headers`, :func:`stream_headers`, :func:`delete_headers`):

* a POST says ``Accept: application/json, text/event-stream`` and ``Content-Type:
  application/json``; a GET says ``Accept: text/event-stream``;
* ``initialize`` carries neither a session id nor a version header; every later request carries
  the ``Mcp-Session-Id`` the server gave (if it gave one) and ``MCP-Protocol-Version`` with the
  negotiated revision when the revision has that header (2025-06-18 on; 2025-03-26 has none).
  A 2026-07-28 POST carries its version and no session, and mirrors its body in more headers
  (:func:`~.stateless_requests.metadata_headers`);
* a GET that takes up a stream again carries ``Last-Event-ID`` (:class:`Resumption`).

What the server's answer to a POST means (:func:`post_answer`), the first rule that applies:

1. ``initialize`` answered 400, 404 or 405: the server does not speak Streamable HTTP; the
   client tries the legacy HTTP+SSE transport at the same URL;
2. 404 to a message that carried a session id: the session is gone (it ended, or the server
   restarted). The message was not processed, so the client initializes again and sends it once
   more;
3. 401 or 403: the server wants a credential (a new one, or one with more scope);
4. 2xx to notifications and responses only: taken (202 is what the spec says); no body to read;
5. ``application/json``, whatever the status: one JSON-RPC message, the answer (an error answer
   on a 4xx or 5xx);
6. ``server/discover`` answered 4xx without JSON: a server of the handshake revisions;
7. any other 4xx or 5xx: an HTTP failure to report;
8. ``text/event-stream``: the answer's stream (related messages, then the answer);
9. anything else (a 202 or 3xx to a request, a media type of neither kind): a broken server.

What the server's answer to a GET means (:func:`stream_answer`): 200 with ``text/event-stream``
is the stream; 405 says the server offers no standalone stream (do not ask again); anything else
is a refusal (a standalone stream is asked for again later; a resumption fails).

Resumption (:class:`Resumption`): the SSE parser's last event id and ``retry:`` outlive a
connection, and nothing else does (each connection is parsed afresh: half an event, or a line
over the parser's bound, is not carried into the next connection). A stream is taken up again
by GET with ``Last-Event-ID`` only when an event id was seen (and not cleared by an empty one),
after the ``retry:`` the server asked for (capped at :data:`MAX_RETRY_SECONDS`; none, or 0,
leaves the wait to the caller's backoff), at most ``max_attempts`` times when bounded.
2026-07-28 streams are not resumable: nothing of this applies to them.

The server's checks each return None or a :class:`Rejection`: the HTTP status, the JSON-RPC
error and the headers to answer with. Those here are ``-32600`` (its id null: the request was
not read); :mod:`.stateless_requests` rejects 2026-07-28 requests with codes of their own.

* POST (:func:`check_post`): a ``Content-Type`` that is not ``application/json`` -> 415; an
  ``Accept`` that lists neither ``*/*`` nor both ``application/json`` and
  ``text/event-stream`` -> 406;
* GET (:func:`check_get`): an ``Accept`` that lists neither ``*/*`` nor ``text/event-stream``
  -> 406;
* the method (:func:`check_method`): not POST, GET or DELETE -> 405 (``Allow: GET, POST,
  DELETE``); GET or DELETE from a 2026-07-28 client, which has no stream and no session -> 405
  (``Allow: POST``);
* the session (handshake revisions): a request other than ``initialize`` without
  ``Mcp-Session-Id`` -> 400 (:data:`SESSION_REQUIRED`); a session the server does not have
  (ended, expired, another caller's) -> 404 (:data:`SESSION_NOT_FOUND`); an
  ``MCP-Protocol-Version`` that is not a handshake revision -> 400 (:func:`check_version`).

A request is of the 2026-07-28 era (:func:`is_stateless`) when its ``MCP-Protocol-Version`` is
not a handshake revision (an unknown one too: it then hears which versions the server speaks)
and it names no session.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .jsonrpc import INVALID_REQUEST, ErrorObject, ErrorResponse, RequestId, encode
from .revisions import HANDSHAKE_REVISIONS, Revision, revision
from .sse import SSEParser

__all__ = [
    "ACCEPT_ANSWERS",
    "EVENT_STREAM",
    "JSON",
    "MAX_RETRY_SECONDS",
    "SESSION_NOT_FOUND",
    "SESSION_REQUIRED",
    "PostAnswer",
    "Rejection",
    "Resumption",
    "Sent",
    "StreamAnswer",
    "accepts",
    "check_get",
    "check_method",
    "check_post",
    "check_version",
    "delete_headers",
    "is_stateless",
    "media_type",
    "post_answer",
    "post_headers",
    "stream_answer",
    "stream_headers",
]

JSON = "application/json"
EVENT_STREAM = "text/event-stream"
ACCEPT_ANSWERS = f"{JSON}, {EVENT_STREAM}"
"""What a POST accepts: the server picks one answer or a stream."""
MAX_RETRY_SECONDS = 30.0
"""The longest wait a server's ``retry:`` is honoured for."""


def media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` value: lower-case, without parameters ("" for
    none)."""
    return (content_type or "").split(";")[0].strip().lower()


# --- the client's requests ------------------------------------------------------------------------

def _session_headers(version: str | None, session_id: str | None) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    if session_id is not None:
        headers.append(("mcp-session-id", session_id))
    if version is not None and Revision(version).has_version_header:
        headers.append(("mcp-protocol-version", version))
    return headers


def post_headers(version: str | None = None,
                 session_id: str | None = None) -> list[tuple[str, str]]:
    """A POST's headers: in the revision ``version`` and the session ``session_id`` (both None
    for ``initialize``)."""
    return [("accept", ACCEPT_ANSWERS), ("content-type", JSON),
            *_session_headers(version, session_id)]


def stream_headers(version: str | None = None, session_id: str | None = None,
                   last_event_id: str | None = None) -> list[tuple[str, str]]:
    """A GET's headers: the standalone stream, or with ``last_event_id`` the rest of a stream
    (:attr:`Resumption.last_event_id`)."""
    headers = [("accept", EVENT_STREAM), *_session_headers(version, session_id)]
    if last_event_id is not None:
        headers.append(("last-event-id", last_event_id))
    return headers


def delete_headers(version: str | None, session_id: str) -> list[tuple[str, str]]:
    """A DELETE's headers: the session it ends."""
    return _session_headers(version, session_id)


# --- what the server's answers mean ---------------------------------------------------------------

class Sent(enum.Enum):
    """What a POST carried, as far as the meaning of its answer goes."""

    INITIALIZE = "initialize"
    DISCOVER = "server/discover"
    REQUEST = "a request"
    """Any other request (or a batch holding one)."""
    NO_REQUEST = "notifications or responses"


class PostAnswer(enum.Enum):
    """What the answer to a POST means (the rules of the module docstring, in order)."""

    NOT_STREAMABLE = "the server does not speak Streamable HTTP (try the legacy transport)"
    SESSION_GONE = "the session is gone: initialize again and send once more"
    UNAUTHORIZED = "the server wants a credential"
    ACCEPTED = "taken: nothing to read"
    JSON = "one JSON-RPC message"
    HANDSHAKE_ERA = "a server of the handshake revisions"
    FAILED = "an HTTP failure"
    STREAM = "an SSE stream"
    UNEXPECTED = "neither an answer nor a stream"


def post_answer(status: int, media: str, sent: Sent, *, in_session: bool) -> PostAnswer:
    """What the answer (``status``, :func:`media_type`) to a POST of ``sent`` means;
    ``in_session``: the POST carried a session id."""
    if sent is Sent.INITIALIZE and status in (400, 404, 405):
        return PostAnswer.NOT_STREAMABLE
    if status == 404 and in_session:
        return PostAnswer.SESSION_GONE
    if status in (401, 403):
        return PostAnswer.UNAUTHORIZED
    if sent is Sent.NO_REQUEST and status < 300:
        return PostAnswer.ACCEPTED
    if media == JSON:
        return PostAnswer.JSON
    if sent is Sent.DISCOVER and 400 <= status < 500:
        return PostAnswer.HANDSHAKE_ERA
    if status >= 400:
        return PostAnswer.FAILED
    if media == EVENT_STREAM:
        return PostAnswer.STREAM
    return PostAnswer.UNEXPECTED


class StreamAnswer(enum.Enum):
    """What the answer to a GET means."""

    OPEN = "the stream"
    NONE = "the server offers no standalone stream"
    REFUSED = "refused"


def stream_answer(status: int, media: str) -> StreamAnswer:
    """What the answer (``status``, :func:`media_type`) to a GET means."""
    if status == 405:
        return StreamAnswer.NONE
    if status == 200 and media == EVENT_STREAM:
        return StreamAnswer.OPEN
    return StreamAnswer.REFUSED


class Resumption:
    """Where a stream stands for taking it up again: the SSE parser of its current connection
    (:meth:`next_connection` makes the next one's) and the reconnections made."""

    def __init__(self, parser: SSEParser, *, max_attempts: int | None = None) -> None:
        self.parser = parser
        self.max_attempts = max_attempts
        self.attempts = 0

    @property
    def last_event_id(self) -> str | None:
        """What ``Last-Event-ID`` says on reconnecting: None when no event id was seen, or the
        last one was empty (an empty ``id:`` clears it: WHATWG, and the header is then not
        sent)."""
        return self.parser.last_event_id or None

    @property
    def retry_delay(self) -> float | None:
        """The seconds the server asked to wait before reconnecting (``retry:``, at most
        :data:`MAX_RETRY_SECONDS`); None when it asked none."""
        retry = self.parser.retry
        return min(retry / 1000, MAX_RETRY_SECONDS) if retry else None

    def next_connection(self) -> SSEParser:
        """A parser for the next connection, with the last event id and ``retry:`` of this
        one and nothing else (now :attr:`parser`)."""
        parser = SSEParser(self.parser.max_event_bytes)
        parser.last_event_id, parser.retry = self.parser.last_event_id, self.parser.retry
        self.parser = parser
        return parser

    def reconnect(self) -> float | None:
        """Take one reconnection (its parser is :attr:`parser`): the seconds to wait before it
        (0: at once), or None when the stream cannot be taken up again (no event id seen, or
        the attempts are spent)."""
        if self.last_event_id is None or (self.max_attempts is not None
                                          and self.attempts >= self.max_attempts):
            return None
        self.attempts += 1
        self.next_connection()
        return self.retry_delay or 0.0


# --- the server's checks --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Rejection:
    """A request refused at the transport: the HTTP status, the JSON-RPC error and the headers
    to answer with."""

    status: int
    error: ErrorObject
    headers: tuple[tuple[str, str], ...] = ()

    def body(self, request_id: RequestId | None = None) -> bytes:
        """The JSON-RPC error response, with the request's id when it could be read."""
        return encode(ErrorResponse(request_id, self.error))


def _reject(status: int, message: str, *headers: tuple[str, str]) -> Rejection:
    return Rejection(status, ErrorObject(INVALID_REQUEST, message), headers)


SESSION_REQUIRED = _reject(400, "Bad Request: the Mcp-Session-Id header is required")
SESSION_NOT_FOUND = _reject(404, "Session not found: it ended or never existed; initialize a "
                                 "new one")
_UNSUPPORTED_MEDIA = _reject(415, "Unsupported Media Type: Content-Type must be application/json")
_POST_NOT_ACCEPTABLE = _reject(406, "Not Acceptable: the Accept header must list "
                                    "application/json and text/event-stream")
_GET_NOT_ACCEPTABLE = _reject(406, "Not Acceptable: the Accept header must list "
                                   "text/event-stream")
_METHOD_NOT_ALLOWED = _reject(405, "Method not allowed: use POST, GET or DELETE",
                              ("allow", "GET, POST, DELETE"))
_STATELESS_POST_ONLY = _reject(405, "Method not allowed: protocol revision 2026-07-28 has no GET "
                                    "stream and no sessions", ("allow", "POST"))


def accepts(accept: str | None, *types: str) -> bool:
    """An ``Accept`` value lists every one of ``types`` (or ``*/*``)."""
    if accept is None:
        return False
    offered = {media_type(part) for part in accept.split(",")}
    return "*/*" in offered or all(t in offered for t in types)


def check_post(content_type: str | None, accept: str | None) -> Rejection | None:
    """A POST's media types (before its body is read)."""
    if media_type(content_type) != JSON:
        return _UNSUPPORTED_MEDIA
    if not accepts(accept, JSON, EVENT_STREAM):
        return _POST_NOT_ACCEPTABLE
    return None


def check_get(accept: str | None) -> Rejection | None:
    """A GET's ``Accept``."""
    return None if accepts(accept, EVENT_STREAM) else _GET_NOT_ACCEPTABLE


def check_method(method: str, *, stateless: bool) -> Rejection | None:
    """The HTTP method, for a request of the 2026-07-28 era (``stateless``) or not."""
    if method not in ("POST", "GET", "DELETE"):
        return _METHOD_NOT_ALLOWED
    if stateless and method != "POST":
        return _STATELESS_POST_ONLY
    return None


def check_version(version: str | None) -> Rejection | None:
    """A handshake request's ``MCP-Protocol-Version``, when it sends one, is a handshake
    revision."""
    if version is None or revision(version) in HANDSHAKE_REVISIONS:
        return None
    return _reject(400, f"Bad Request: unsupported MCP-Protocol-Version {version[:40]!r}")


def is_stateless(version: str | None, session_id: str | None) -> bool:
    """A request of the 2026-07-28 era (see the module docstring)."""
    return (version is not None and revision(version) not in HANDSHAKE_REVISIONS
            and session_id is None)
