"""A scripted HTTP peer for tests: a threaded server on 127.0.0.1 that answers every POST with
what a function of the request returns. For the peers no installable program plays on demand
(a token endpoint or an STS that refuses in a given way): a stand-in, and said so where used."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Asked", "answering"]


@dataclass(frozen=True)
class Asked:
    path: str
    headers: dict[str, str]
    """Lower-cased names."""
    body: bytes


Answer = tuple[int, str, bytes]
"""Status, content type, body."""


@contextmanager
def answering(respond: Callable[[Asked], Answer]) -> Iterator[str]:
    """The server's base URL (``http://127.0.0.1:PORT``) while it runs."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            status, content_type, data = respond(Asked(
                self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()  # shutdown() waits up to one poll
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
