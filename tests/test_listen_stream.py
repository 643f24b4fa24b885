"""The client end of a ``subscriptions/listen`` stream whose filter changes
(``vmcp_trio/http/listen_stream.py``), against a server written here that acknowledges each
stream's filter after a moment (the moment is what lets changes overlap; the SDK servers of the
other tests acknowledge too fast to show it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from vmcp_trio.http.listen_stream import ListenStream
from vmcp_trio.protocol.jsonrpc import Message, Notification
from vmcp_trio.runtime.supervisor import RECONNECT, Supervisor

CAPABILITIES = {"resources": {"subscribe": True}}


class SlowServer:
    """Acknowledges each stream's whole filter after ``delay``, then sends one update for
    every URI it was asked for, and holds the stream open."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.opened: list[dict[str, Any]] = []

    async def __call__(self, wanted: dict[str, Any],
                       on_message: Callable[[Message], Awaitable[None]]) -> None:
        self.opened.append(wanted)
        await trio.sleep(self.delay)
        await on_message(Notification("notifications/subscriptions/acknowledged",
                                      {"notifications": wanted}))
        for uri in wanted.get("resourceSubscriptions", []):
            await on_message(Notification("notifications/resources/updated", {
                "uri": uri, "_meta": {"io.modelcontextprotocol/subscriptionId": "s"}}))
        await trio.sleep_forever()


async def test_overlapping_changes_are_each_answered_by_an_acknowledgement_holding_them() -> None:
    """Five subscriptions at once: each reopening cancels the stream the one before opened,
    before its acknowledgement; every caller still returns with its URI honoured (a later
    acknowledgement answers the earlier changes), none waits for the timeout."""
    server = SlowServer(0.2)
    delivered: list[dict[str, Any] | None] = []

    async def deliver(notification: Notification) -> None:
        delivered.append(notification.params)

    listen = ListenStream(server, deliver, CAPABILITIES, name="test", wait=5)
    honoured: dict[str, bool] = {}

    async def subscribe(uri: str) -> None:
        listen.uris.add(uri)
        await listen.change()
        honoured[uri] = uri in listen.honored_uris

    uris = [f"file:///{n}" for n in range(5)]
    async with trio.open_nursery() as nursery:
        Supervisor(nursery).start_soon("listen", listen.run, policy=RECONNECT)
        started = trio.current_time()
        with trio.fail_after(4):
            async with trio.open_nursery() as callers:
                for uri in uris:
                    callers.start_soon(subscribe, uri)
                    await trio.sleep(0.02)
        took = trio.current_time() - started
        while len(delivered) < 5:
            await trio.sleep(0.01)
        listen.close()
    assert honoured == dict.fromkeys(uris, True)
    assert took < 1.0
    assert server.opened[-1] == {"resourceSubscriptions": sorted(uris)}
    assert {params["uri"] for params in delivered if params} == set(uris)
    assert all("_meta" not in params for params in delivered if params)


async def test_a_change_the_server_never_acknowledges_returns_after_the_wait() -> None:
    """No acknowledgement comes: the caller is answered after ``wait`` (nothing honoured), and
    at once after ``close``."""
    listen = ListenStream(SlowServer(60), lambda notification: trio.sleep(0), CAPABILITIES,
                          name="test", wait=0.3)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listen.run)
        listen.uris.add("file:///a")
        started = trio.current_time()
        await listen.change()
        assert 0.3 <= trio.current_time() - started < 1 and not listen.honored_uris
        listen.close()
        with trio.fail_after(1):
            await listen.change()
