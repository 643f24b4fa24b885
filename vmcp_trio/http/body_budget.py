"""How many bytes of request bodies a forwarding server holds at once, and how many one client may.

``vmcp proxy`` and the tunnel relay read a request's body whole before forwarding it (it may be
sent again after a 401; the tunnel's stream opens once it is there), each body bounded by
``max_body_bytes``. Without a bound on their sum, many concurrent maximal uploads hold memory
without limit. :class:`BodyBudget` is that bound:

* A request reserves its body's size before reading it: the declared ``Content-Length``, else
  (a chunked body) the most it may be. The reservation is held until the exchange ends.
* No more than ``total`` bytes are reserved at once, and no more than ``per_client`` by one
  client (its address, or the identity its token names): one client's uploads cannot take the
  budget from the others.
* A reservation that does not fit waits up to ``wait`` seconds for room, then is refused: the
  caller answers 503 with ``Retry-After``, never a hang.

:meth:`BodyBudget.body` is what a forwarding server calls: the body of a request, read within
the budget and held for the block, or the request answered (503 without room, 413 too large).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from .asgi import BodyTooLarge, HttpRequest, Send, send_json

__all__ = ["BodyBudget"]


class BodyBudget:
    def __init__(self, total: int = 64 * 1024 * 1024, *, per_client: int | None = None,
                 wait: float = 10.0) -> None:
        if total < 1:
            raise ValueError("the body budget must be positive")
        self.total = total
        self.per_client = per_client if per_client is not None else max(total // 4, 1)
        self.wait = wait
        self.reserved = 0
        self._by_client: dict[str, int] = {}
        self._released = trio.Event()
        self._waiting = 0

    def _fits(self, client: str, amount: int) -> bool:
        return (self.reserved + amount <= self.total
                and self._by_client.get(client, 0) + amount <= self.per_client)

    async def _take(self, client: str, amount: int) -> bool:
        if not self._fits(client, amount):  # the usual case fits at once: no deadline set
            self._waiting += 1
            try:
                with trio.move_on_after(self.wait):
                    while not self._fits(client, amount):
                        await self._released.wait()
            finally:
                self._waiting -= 1
            if not self._fits(client, amount):
                return False
        self.reserved += amount
        self._by_client[client] = self._by_client.get(client, 0) + amount
        return True

    def _give_back(self, client: str, amount: int) -> None:
        self.reserved -= amount
        left = self._by_client[client] - amount
        if left:
            self._by_client[client] = left
        else:
            del self._by_client[client]
        if self._waiting:
            self._released.set()
            self._released = trio.Event()

    @asynccontextmanager
    async def reserve(self, client: str, amount: int) -> AsyncIterator[bool]:
        """Hold ``amount`` bytes (capped at ``per_client``) for ``client`` for the block:
        True, or False when there was no room within ``wait`` seconds (nothing is held)."""
        amount = max(min(amount, self.per_client), 0)
        if not await self._take(client, amount):
            yield False
            return
        try:
            yield True
        finally:
            self._give_back(client, amount)

    @asynccontextmanager
    async def body(self, request: HttpRequest, send: Send, limit: int, *,
                   server: str) -> AsyncIterator[bytes | None]:
        """The body of ``request`` (at most ``limit`` bytes), reserved for and read within the
        budget, held for the block; None when the request was answered instead (503 with
        ``Retry-After`` without room, 413 past ``limit``). ``server`` names who is busy."""
        client = request.client_group
        amount = max(min(request.body_bound(limit), self.per_client), 0)
        if not await self._take(client, amount):
            await send_json(send, 503, {"error": f"{server}_busy", "error_description":
                                        f"the {server} holds as many request bodies as it "
                                        "may; try again"}, [("retry-after", "1")])
            yield None
            return
        try:
            try:
                body = await request.body(limit)
            except BodyTooLarge as exc:
                await send_json(send, 413, {"error": "request_too_large",
                                            "error_description": str(exc)})
                yield None
                return
            yield body
        finally:
            self._give_back(client, amount)
