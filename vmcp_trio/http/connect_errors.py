"""Why a client connection (TCP, then TLS) could not be made, in the one line an operator reads.

trio says ``all attempts to connect to HOST:PORT failed`` and keeps each attempt's error as the
cause; a TLS handshake that fails is a ``BrokenResourceError`` whose cause is the ``SSLError``.
:func:`connect_failure` digs the reason out: ``cannot connect to 127.0.0.1:8443: connection
refused``, ``...: the name does not resolve (Name or service not known)``, ``...: TLS
handshake failed: certificate verify failed: self-signed certificate``. The HTTP client and
the WebSocket client both say it this way.
"""

from __future__ import annotations

import os
import socket
import ssl

__all__ = ["connect_failure"]


def connect_failure(error: BaseException, host: str, port: int) -> str:
    """``cannot connect to HOST:PORT: REASON`` for an error of opening a connection."""
    return f"cannot connect to {host}:{port}: {_reason(error)}"[:500]


def _reason(error: BaseException) -> str:
    cause = error
    while True:  # to the first attempt's own error (trio's group, or the TLS stream's cause)
        inner = cause.__cause__
        if isinstance(inner, BaseExceptionGroup) and inner.exceptions:
            inner = inner.exceptions[0]
        if inner is None:
            break
        cause = inner
    if isinstance(cause, socket.gaierror):
        return f"the name does not resolve ({cause.strerror or cause})"
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"TLS handshake failed: {cause.verify_message or cause.reason}"
    if isinstance(cause, ssl.SSLError):
        return f"TLS handshake failed: {cause.reason or cause}"
    if isinstance(cause, OSError) and cause.errno:
        return os.strerror(cause.errno).lower()
    return str(cause) or type(cause).__name__
