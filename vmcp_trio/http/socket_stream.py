"""A trio stream over one connected socket, for the lean server, the upstream client and the
WebSocket: what :class:`trio.SocketStream` does, in fewer layers.

trio's ``send_all`` and ``receive_some`` each pass through a conflict detector, a generator
context manager that translates errors, the socket wrapper's helper with an async context manager
of its own, and a trip through the scheduler after an operation that did not have to wait. A call
through the gateway makes four of them; see docs/benchmarks.md for what this saved.

The rules it keeps:

* **Cancellation first.** Every operation raises :class:`trio.Cancelled` before touching the
  socket when its task is cancelled, as trio's do.
* **Reading yields.** :meth:`LeanSocketStream.receive_some` always passes through the scheduler:
  it waits for the socket when nothing is there, and yields after a read that did not wait, so a
  peer that keeps the socket full cannot hold the loop.
* **Writing yields too.** :meth:`LeanSocketStream.send_all` yields after a write the kernel
  took whole, and waits for room when the socket is full, as trio's does. (Returning at once
  cost more, not less: the task then reached its next read before the peer had answered, and
  waited for the socket where a yield would have found the answer there; measured 5% more CPU
  a call through the gateway.)
* **trio's errors.** A socket already closed here raises :class:`trio.ClosedResourceError` (also
  when another task closes it during a wait); any other failure of the socket raises
  :class:`trio.BrokenResourceError` with the ``OSError`` as its cause. A write cancelled midway
  leaves the stream unusable, as trio's does.
* **Options as trio sets them.** TCP sockets get ``TCP_NODELAY``, and ``TCP_NOTSENT_LOWAT`` of
  16 KiB where the system has it.
* **No conflict detection.** Two tasks must not read, or write, at once; every user here holds a
  lock or a flag of its own for that (trio's detector was a cost on every operation).
"""

from __future__ import annotations

import errno
import socket
from contextlib import suppress

import trio

__all__ = ["LeanSocketStream", "adopt"]

_DEFAULT_READ = 65536


class LeanSocketStream(trio.abc.HalfCloseableStream):
    """A connected, non-blocking socket as a trio stream (``socket`` is the standard library's)."""

    __slots__ = ("socket",)

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
            if hasattr(socket, "TCP_NOTSENT_LOWAT"):
                with suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, 2**14)
        self.socket = sock

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        sock = self.socket
        size = _DEFAULT_READ if max_bytes is None else max_bytes
        if size < 1:
            raise ValueError("max_bytes must be >= 1")
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            data = sock.recv(size)
        except BlockingIOError:
            pass
        except OSError as exc:
            raise _translated(exc) from exc
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return data
        while True:
            await trio.lowlevel.wait_readable(sock)
            try:
                return sock.recv(size)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise _translated(exc) from exc

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        sock = self.socket
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            sent = sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise _translated(exc) from exc
        if sent == len(data):
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        with memoryview(data) as view:
            while sent < len(view):
                await trio.lowlevel.wait_writable(sock)
                try:
                    sent += sock.send(view[sent:])
                except BlockingIOError:
                    continue
                except OSError as exc:
                    raise _translated(exc) from exc

    async def wait_send_all_might_not_block(self) -> None:
        if self.socket.fileno() == -1:
            raise trio.ClosedResourceError("the socket was closed")
        await trio.lowlevel.wait_writable(self.socket)

    async def send_eof(self) -> None:
        await trio.lowlevel.checkpoint()
        try:
            self.socket.shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise _translated(exc) from exc

    async def aclose(self) -> None:
        if self.socket.fileno() != -1:
            trio.lowlevel.notify_closing(self.socket)
            self.socket.close()
        await trio.lowlevel.checkpoint()


def adopt(stream: trio.SocketStream) -> LeanSocketStream:
    """The connection of trio's ``stream`` (from ``open_tcp_stream`` or a listener), moved to a
    :class:`LeanSocketStream`; ``stream`` no longer owns it."""
    return LeanSocketStream(socket.socket(fileno=stream.socket.detach()))


def _translated(error: OSError) -> trio.ClosedResourceError | trio.BrokenResourceError:
    if error.errno == errno.EBADF:
        return trio.ClosedResourceError("the socket was closed")
    return trio.BrokenResourceError(f"the connection failed: {error}")
