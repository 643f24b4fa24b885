"""AWS Signature Version 4 of one HTTP request: the headers that sign it.

One job: :func:`sign` computes, from an :class:`OutgoingRequest` (method, URL, the headers it
will carry, body) and temporary credentials, the ``x-amz-date``, ``x-amz-security-token`` and
``authorization`` headers that AWS checks (``AWS4-HMAC-SHA256``, as AWS's SDKs sign). Rules it
keeps:

* Signed headers: ``host`` (as the HTTP client writes it: the port only when not the scheme's
  default), ``content-type`` when the request has one, ``x-amz-date`` and, with a session token,
  ``x-amz-security-token``. Nothing added after signing (trace context, say) is covered.
* The canonical URI is the request path percent-encoded once more (``/`` and ``~`` kept), the
  canonical query its ``name=value`` pairs as sent, sorted: AWS's rule for every service but
  S3, and what botocore computes.
* The payload hash is the SHA-256 of the body (of nothing for a GET).
* Pure: no I/O, no clock of its own (``now`` is given), no secret in anything it returns but
  the signature.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple
from urllib.parse import quote, urlsplit

from ...http.client import Origin

__all__ = ["AwsCredentials", "OutgoingRequest", "sign"]

ALGORITHM = "AWS4-HMAC-SHA256"


@dataclass(frozen=True)
class AwsCredentials:
    """Temporary credentials of an assumed role, until ``expires_at`` (epoch seconds)."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str = field(repr=False)
    expires_at: float


class OutgoingRequest(NamedTuple):
    """A request to a backend, as a credential that depends on it (a signature) sees it: the
    transport's headers (those a signature may cover) and the body."""

    method: str
    url: str
    headers: Sequence[tuple[str, str]] = ()
    body: bytes = b""


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def sign(request: OutgoingRequest, credentials: AwsCredentials, *, region: str, service: str,
         now: datetime) -> list[tuple[str, str]]:
    """The headers that sign ``request`` (``now`` in UTC)."""
    parts = urlsplit(request.url)
    origin, _ = Origin.of(request.url)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    added = [("x-amz-date", amz_date)]
    if credentials.session_token:
        added.append(("x-amz-security-token", credentials.session_token))
    signed = {"host": origin.host_header.decode("ascii")}
    for name, value in (*request.headers, *added):
        if name.lower() == "content-type" or name.lower().startswith("x-amz-"):
            signed[name.lower()] = " ".join(value.split())
    names = sorted(signed)
    pairs = sorted(pair.partition("=")[::2] for pair in parts.query.split("&") if pair)
    query = "&".join(f"{name}={value}" for name, value in pairs)
    canonical = "\n".join((
        request.method.upper(), quote(parts.path or "/", safe="/~"), query,
        "".join(f"{name}:{signed[name]}\n" for name in names), ";".join(names),
        hashlib.sha256(request.body).hexdigest()))
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join((ALGORITHM, amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()))
    key = _hmac(f"AWS4{credentials.secret_access_key}".encode(), day)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return [*added, ("authorization",
                     f"{ALGORITHM} Credential={credentials.access_key_id}/{scope}, "
                     f"SignedHeaders={';'.join(names)}, Signature={signature}")]
