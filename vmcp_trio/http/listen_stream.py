"""The client end of a 2026-07-28 ``subscriptions/listen`` stream whose filter changes: the
gateway's links to 2026-07-28 backends and the stdio proxy's dual-era bridge each keep one.

Rules it keeps:

* One stream at a time, asking for
  :func:`~vmcp_trio.protocol.stateless_client.listen_filter` of the server's capabilities, the
  subscribed URIs (:attr:`ListenStream.uris`) and the watched tasks
  (:attr:`ListenStream.task_ids`); none while there is nothing to ask for.
* :meth:`ListenStream.change` (after changing those sets) reopens the stream at once with the
  new filter and returns when the server acknowledged a filter at least that new (a later
  change's acknowledgement answers an earlier one too: its filter holds both), when the stream
  ended without one, after ``wait`` seconds, or at once when the stream is closed. What the
  last acknowledgement honoured is :attr:`~ListenStream.honored_uris` and
  :attr:`~ListenStream.honored_task_ids`.
* What the stream delivers goes to ``deliver`` without the stream's subscription id; the
  acknowledgement is the stream's own.
* :meth:`ListenStream.run` is for the supervisor: a stream that ends or breaks raises
  :class:`~vmcp_trio.runtime.supervisor.Retry` (the backoff starts over when it had been
  acknowledged), so it is reopened after the backoff; it returns once closed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from ..protocol.jsonrpc import Message, Notification
from ..protocol.stateless_client import acknowledged, listen_filter, listened
from ..protocol.tasks_extension import WATCH_FILTER
from ..runtime.supervisor import Retry

__all__ = ["ListenStream", "OpenStream"]

OpenStream = Callable[[dict[str, Any], Callable[[Message], Awaitable[None]]], Awaitable[None]]
"""Send ``subscriptions/listen`` asking for these ``notifications``, and give each message of
its stream to the callable, until the stream ends (a failure is logged and returned from, not
raised)."""


class ListenStream:
    def __init__(self, open_stream: OpenStream,
                 deliver: Callable[[Notification], Awaitable[None]],
                 server_capabilities: Mapping[str, Any], *, name: str,
                 wait: float = 30.0) -> None:
        self.open_stream = open_stream
        self.deliver = deliver
        self.server_capabilities = server_capabilities
        self.name = name
        """Who listens, for the supervisor's log line."""
        self.wait = wait
        self.uris: set[str] = set()
        self.task_ids: set[str] = set()
        self.honored_uris: frozenset[str] = frozenset()
        self.honored_task_ids: frozenset[str] = frozenset()
        self._acked = trio.Event()
        self._filter_changed = trio.Event()
        self._scope: trio.CancelScope | None = None
        self._closed = False

    async def change(self) -> None:
        """Reopen the stream with the current filter; back when it is acknowledged (see the
        module docstring)."""
        if self._closed:
            return
        acked = self._acked = trio.Event()
        self._filter_changed.set()
        if self._scope is not None:
            self._scope.cancel()
        with trio.move_on_after(self.wait):
            while True:
                await acked.wait()
                if acked is self._acked or self._closed:
                    return
                acked = self._acked  # a later change reopened it: its answer is ours too

    async def run(self) -> None:
        """Keep the stream open with the current filter until closed."""
        while not self._closed:
            wanted = listen_filter(self.server_capabilities, self.uris, self.task_ids)
            acked = self._acked
            self._filter_changed = trio.Event()
            if not wanted:
                self.honored_uris = self.honored_task_ids = frozenset()
                acked.set()
                await self._filter_changed.wait()
                continue
            with trio.CancelScope() as scope:
                self._scope = scope
                opened = await self._listen_once(wanted, acked)
            self._scope = None
            if not scope.cancelled_caught and not self._closed:
                raise Retry(f"{self.name}: the listen stream ended", reset=opened)

    async def _listen_once(self, wanted: dict[str, Any], acked: trio.Event) -> bool:
        """One stream, until it ends: whether the server acknowledged it."""
        opened = False

        async def on_message(message: Message) -> None:
            nonlocal opened
            if not isinstance(message, Notification):
                return
            if message.method == "notifications/subscriptions/acknowledged":
                params = message.params or {}
                self.honored_uris = acknowledged(params, "resourceSubscriptions")
                self.honored_task_ids = acknowledged(params, WATCH_FILTER)
                opened = True
                acked.set()
                return
            await self.deliver(Notification(message.method, listened(message.params)))

        try:
            await self.open_stream(wanted, on_message)
        finally:
            acked.set()  # nobody waits for an acknowledgement that will not come
        return opened

    def close(self) -> None:
        """Stop listening; whoever waits for an acknowledgement gets none."""
        self._closed = True
        self._filter_changed.set()
        self._acked.set()
        if self._scope is not None:
            self._scope.cancel()
