"""The replicas of one gateway: who is alive, and what they tell each other (Redis pub/sub).

With ``sessionStorage: redis`` every replica of a gateway holds a :class:`Fleet` on the shared
Redis. Rules it keeps:

* Each replica has a random id for its life (:attr:`Fleet.replica`) and proves it is alive with
  a key ``replica:<id>`` renewed every ``heartbeat`` seconds that expires after three of them:
  a replica killed without a word is known dead within that bound (:meth:`Fleet.alive`). A
  replica is not ready (``/readyz``) before its first heartbeat is written.
* Messages are small JSON objects with a ``kind``, the sender and, for a message meant for one
  replica, its id. One for all (:meth:`Fleet.announce`) goes on the shared channel (``fleet``),
  which every replica hears (a fleet is a handful of replicas, not hundreds); one for a replica
  (:meth:`Fleet.tell`) on that replica's own channel (``fleet:<id>``), which it alone subscribes
  to besides the shared one, so that Redis's count of receivers says whether it heard the
  message (0: not subscribed now, e.g. while its subscription is renewed after a failover). A
  replica drops its own messages and those addressed to another. Order is kept on each
  channel (among the messages to one replica, among announcements), not between the two.
* A handler runs in its subscription's task: it must not block (it may start work elsewhere).
  A handler that fails is logged and the subscription goes on.
* Redis unavailable: sending raises :class:`~vmcp_trio.runtime.redis.StorageUnavailable` (the
  caller decides what that costs); the heartbeat keeps trying, and until it succeeds again the
  other replicas take this one for dead.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

import orjson
import trio

from ..runtime.redis import RedisConnection
from ..runtime.shared_storage import StorageUnavailable, milliseconds

__all__ = ["Fleet", "Handler"]

log = logging.getLogger("vmcp.fleet")

CHANNEL = "fleet"
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""A message's bound (a parked call's reply passed back may be a whole tool result)."""
Handler = Callable[[dict[str, Any]], None]
MAX_LISTED = 100
"""The most replicas :meth:`Fleet.members` lists."""


def _glob_escaped(text: str) -> str:
    """``text`` matched literally in a Redis ``MATCH`` pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def _own_channel(replica: str) -> str:
    """The channel of the messages for one replica."""
    return f"{CHANNEL}:{replica}"


class Fleet:
    def __init__(self, redis: RedisConnection, *, heartbeat: float = 2.0) -> None:
        self.redis = redis
        self.replica = secrets.token_hex(4)
        self.heartbeat = heartbeat
        self._handlers: dict[str, Handler] = {}
        self.beating = False
        """The heartbeat was written (until then this replica is not ready: the others would
        take it for dead)."""
        redis.subscribe("fleet messages", CHANNEL, self._heard)
        redis.subscribe("fleet messages to this replica", _own_channel(self.replica),
                        self._heard)

    def on(self, kind: str, handler: Handler) -> None:
        """Call ``handler`` with each message of ``kind`` another replica sends this one."""
        self._handlers[kind] = handler

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep this replica's heartbeat (a supervised task)."""
        task_status.started()
        key, ttl = self.redis.key("replica", self.replica), milliseconds(3 * self.heartbeat)
        failing: str | None = None
        while True:
            try:
                await self.redis.do(lambda r: r.set(key, "1", px=ttl))
                failing, self.beating = None, True
            except StorageUnavailable as exc:
                if failing is None and self.redis.connected:  # once per outage
                    log.warning("replica %s: heartbeat not written (the others take this "
                                "replica for dead until it is): %s", self.replica, exc)
                failing = str(exc)
            # Failing (or not connected yet): again soon, the others take this one for dead.
            await trio.sleep(self.heartbeat if failing is None else min(self.heartbeat, 0.2))

    async def alive(self, replica: str) -> bool:
        """Whether ``replica`` kept its heartbeat (this replica always is)."""
        if replica == self.replica:
            return True
        return bool(await self.redis.do(lambda r: r.exists([self.redis.key("replica",
                                                                           replica)])))

    async def members(self) -> list[tuple[str, float]]:
        """The replicas whose heartbeat is kept now, each with the seconds since its last
        heartbeat (this one included), at most :data:`MAX_LISTED` (a SCAN, never ``KEYS``)."""
        pattern = _glob_escaped(self.redis.key("replica", "")) + "*"
        full = milliseconds(3 * self.heartbeat)

        async def read(client: Any) -> list[tuple[str, float]]:
            found: list[str] = []
            async for key in client.scan_iter(match=pattern, count=100):
                found.append(key)
                if len(found) >= MAX_LISTED:
                    break
            out = []
            for key in found:
                left = await client.pttl(key)
                if left > 0:
                    out.append((key.rsplit(":", 1)[-1], max(0.0, (full - left) / 1000)))
            return sorted(out)

        members: list[tuple[str, float]] = await self.redis.do(read)
        return members

    async def announce(self, kind: str, **fields: Any) -> None:
        """Tell every other replica (whoever listens now)."""
        await self._send(CHANNEL, {"kind": kind, **fields})

    async def tell(self, replica: str, kind: str, **fields: Any) -> bool:
        """Tell one replica (it alone acts on it): whether a subscription of that replica
        received the message (False: it was not listening, the message is lost)."""
        return await self._send(_own_channel(replica), {"kind": kind, "to": replica, **fields}) > 0

    async def _send(self, channel: str, message: dict[str, Any]) -> int:
        data = orjson.dumps({**message, "from": self.replica}).decode()
        if len(data) > MAX_MESSAGE_BYTES:
            raise ValueError(f"a fleet message of {len(data)} bytes is too large")
        return await self.redis.publish(channel, data)

    def _heard(self, data: str) -> None:
        try:
            message = orjson.loads(data)
        except orjson.JSONDecodeError:
            log.warning("a fleet message that is not JSON was dropped")
            return
        if (not isinstance(message, dict) or message.get("from") == self.replica
                or message.get("to", self.replica) != self.replica):
            return
        handler = self._handlers.get(str(message.get("kind")))
        if handler is None:
            return
        try:
            handler(message)
        except Exception as exc:  # one message's fault: the subscription goes on
            log.error("fleet message %r failed", str(message.get("kind"))[:40], exc_info=exc)
