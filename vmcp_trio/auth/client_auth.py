"""OAuth client authentication, the client side: one encoding for every place vmcp
authenticates as a client (introspection, token exchange, upstream providers)."""

from __future__ import annotations

import base64
from urllib.parse import quote_plus

__all__ = ["basic_authorization"]


def basic_authorization(client_id: str, secret: str) -> str:
    """The ``Authorization`` value of ``client_secret_basic``: RFC 6749 section 2.3.1 has both
    parts form-encoded (``application/x-www-form-urlencoded``) before the Basic encoding."""
    pair = f"{quote_plus(client_id, safe='')}:{quote_plus(secret, safe='')}"
    return "Basic " + base64.b64encode(pair.encode("ascii")).decode("ascii")
