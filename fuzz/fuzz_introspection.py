"""Fuzz the reading of an RFC 7662 introspection answer (vmcp_trio/auth/incoming/introspection.py,
``incomingAuth`` with opaque tokens): ``Introspector.introspect`` of a token against an answer of
any status and body (the HTTP client, the only I/O, replaced; run under ``trio.run`` for its
deadline), twice, so that the second answer comes from the cache.

Only TokenError and IntrospectionUnavailable escape, and neither message holds the token or the
client secret. Claims are returned only for a 200 JSON object whose ``active`` is ``true``, whose
``exp`` (when a number) lies ahead, whose ``iss`` (when present) is the issuer and whose ``aud``
(when present) holds the audience; they are the answer itself. A non-200 answer or a body that is
not a JSON object is IntrospectionUnavailable; an answer that is not active is TokenError. The
second call gives the same outcome, from the cache without asking again for an active answer
(kept at most until its ``exp``) and an inactive one.

The input: a byte (bits 0-2: the HTTP status), then the body."""

from __future__ import annotations

import time
from typing import Any

import orjson
import trio

from vmcp_trio.auth.incoming.introspection import IntrospectionUnavailable, Introspector
from vmcp_trio.auth.jwt import TokenError
from vmcp_trio.http.client import ConnectGuard, HttpClient

STATUSES = (200, 200, 200, 200, 201, 400, 401, 503)
ISSUER, AUDIENCE = "https://issuer.example", "https://mcp.example/mcp"
TOKEN, SECRET = "opaque-t0ken-value-under-test", "intr0spection-s3cret"


class Answering(HttpClient):
    """An HTTP client whose exchanges are answered from the input, counted."""

    answer: tuple[int, bytes] = (200, b"")
    asked = 0

    async def request(self, method: str, url: str, *, headers: Any = (), body: bytes = b"",
                      limit: int = 0, guard: ConnectGuard | None = None
                      ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        self.asked += 1
        return self.answer[0], [], self.answer[1]


CLIENT = Answering()  # one: an HTTP client's TLS context costs milliseconds


async def endpoint() -> str:
    return ISSUER + "/introspect"


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def outcome(introspector: Introspector) -> tuple[str, Any]:
    try:
        return "claims", trio.run(introspector.introspect, TOKEN)
    except (TokenError, IntrospectionUnavailable) as exc:
        check(TOKEN not in str(exc) and SECRET not in str(exc), f"{exc!r} holds a secret")
        return type(exc).__name__, str(exc)


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    status, body = STATUSES[data[0] & 7], data[1:]
    CLIENT.answer, CLIENT.asked = (status, body), 0
    introspector = Introspector(endpoint, CLIENT, issuer=ISSUER, audience=AUDIENCE,
                                client_id="vmcp", client_secret=SECRET, allow_private=True)
    first = outcome(introspector)
    try:
        document = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        document = None
    if first[0] == "claims":
        claims = first[1]
        check(status == 200 and claims is not None and claims == document
              and claims.get("active") is True, f"HTTP {status} {body!r} gave {claims!r}")
        aud = claims.get("aud")
        check(aud is None or AUDIENCE in (aud if isinstance(aud, list) else [aud]),
              f"audience {aud!r} let through")
        check(claims.get("iss") in (None, ISSUER), f"issuer {claims.get('iss')!r} let through")
    elif first[0] == "IntrospectionUnavailable":
        check(status != 200 or not isinstance(document, dict), f"HTTP {status} {body!r} "
              f"was unavailable: {first[1]}")
    else:
        check(status == 200 and isinstance(document, dict), f"{first} for HTTP {status}")
    second = outcome(introspector)
    check(second == first or (first[0] == "claims" and second[0] == "TokenError"),
          f"again: {second} after {first}")
    exp = first[1].get("exp") if first[0] == "claims" else None
    soon = isinstance(exp, int | float) and not isinstance(exp, bool) and exp < time.time() + 5
    if (first[0] == "claims" and not soon) or first[1] == "the token is not active":
        check(CLIENT.asked == 1, f"asked {CLIENT.asked} times for a cached answer")


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
