"""What the client of ``vmcp proxy stdio`` is told when the remote refuses a message with no
JSON-RPC answer.

One job: turn a refusal (status, content type, the start of the body) into the words of the
JSON-RPC error the client gets, so that the Streamable HTTP bridge, the dual-era bridge and the
HTTP+SSE session say it alike. Rules kept: the HTTP status always; an OAuth error object (RFC
6750 section 3.1: a 401 or a 403 the credentials could not cure) adds its code and description,
cleaned to one bounded line (:func:`~vmcp_trio.auth.oauth.tokens.oauth_error`); any other body
adds only its content type, never its text (a page may say anything).
"""

from __future__ import annotations

import contextlib

import orjson

from ..auth.oauth.tokens import oauth_error
from ..protocol.streamable import JSON

__all__ = ["refusal"]


def refusal(status: int, media: str, body: bytes) -> str:
    """``answered HTTP <status> (<the OAuth error, or the content type>)``."""
    error = None
    if media == JSON:
        with contextlib.suppress(orjson.JSONDecodeError):
            error = oauth_error(orjson.loads(body))
    return f"answered HTTP {status} " + (f"({error[1]})" if error is not None
                                         else f"({media or 'no content type'})")
