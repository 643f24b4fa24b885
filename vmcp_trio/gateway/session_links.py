"""One client session's links to its backends: connecting, following health and reloads, retiring.

:class:`SessionLinks` holds a session's link to each backend it could connect to (by backend
name) and, for each it could not, why (``failed``). The rules it keeps:

* A backend is connected when the session starts, when it becomes healthy again, and when a
  reload adds it; one that is unhealthy, or whose connection fails, is in ``failed`` with the
  reason, never in both.
* A session copied from another replica's record (``joined``) joins the backend sessions the
  record names instead of opening new ones; a backend the record does not name is connected
  anew, and the record is said to have changed (``changed``).
* A reload retires links: a removed backend's link leaves at once (no new call goes to it); a
  changed backend is connected anew first, then swapped in, so that no call finds it missing
  meanwhile. A retired link is closed once the calls in flight on it (counted by
  :meth:`calling`) are done, or after the backend's timeout.
* :meth:`link` is the one way a request gets a link: a backend that is not connected raises
  :class:`~.backends.base.BackendError` naming it and why.
* What a backend has of its own (an MCPServer's webhooks, an MCPRemoteProxy's ``authzConfig``:
  what ToolHive's proxy in front of it enforces) stands between the session's caller and the
  backend: :meth:`admitted` gives the params to send to it, or the refusal
  (:meth:`~.admission.Gate.admit_at`).

It is handed what it uses of its session (the owner's id, the client's capabilities, the
caller, the sink of a backend's unrelated messages, the record it joined), never the session.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, ItemsView, Iterator, Mapping, ValuesView
from typing import Any

import trio

from ..auth.caller import Caller
from ..auth.policy.mcp_checks import NO_ANNOTATIONS
from ..protocol.jsonrpc import ErrorResponse, Request
from ..protocol.revisions import revision
from ..runtime.supervisor import Supervisor
from .backends.base import BackendError, BackendLink, Sink
from .backends.http import HttpBackendLink
from .session_records import SessionRecord
from .session_services import SessionServices

__all__ = ["SessionLinks"]

log = logging.getLogger("vmcp.session")


class SessionLinks:
    def __init__(self, services: SessionServices, *, owner: str,
                 capabilities: dict[str, Any], caller: Callable[[], Caller],
                 sink: Callable[[str], Sink], changed: Callable[[], None]) -> None:
        self.services = services
        self.owner = owner
        self._capabilities = capabilities
        self._caller = caller
        self._sink = sink
        self._changed = changed
        self._links: dict[str, BackendLink] = {}
        self.failed: dict[str, str] = {}
        """Backends this session could not connect to, with why."""
        self.left_out: frozenset[str] = frozenset()
        """Of those, the ones not known to be up (their last health check did not pass, or
        none ran yet) or that did not answer within the opening's deadline: left out, not
        failed (``partialFailureMode: fail`` fails a request only for a backend that was up
        and failed in it)."""
        self.joined: SessionRecord | None = None
        """The record of another replica's session this copy was made from."""
        self._calls_on: Counter[BackendLink] = Counter()

    # --- a mapping of backend names to links ----------------------------------------------------

    def get(self, name: str) -> BackendLink | None:
        return self._links.get(name)

    def __getitem__(self, name: str) -> BackendLink:
        return self._links[name]

    def __contains__(self, name: object) -> bool:
        return name in self._links

    def __len__(self) -> int:
        return len(self._links)

    def __iter__(self) -> Iterator[str]:
        return iter(self._links)

    def values(self) -> ValuesView[BackendLink]:
        return self._links.values()

    def items(self) -> ItemsView[str, BackendLink]:
        return self._links.items()

    def link(self, name: str) -> BackendLink:
        """The link to ``name``; raises :class:`BackendError` (why it is not connected)."""
        link = self._links.get(name)
        if link is None:
            raise BackendError(name, self.failed.get(name, "is not connected"))
        return link

    def instructions(self) -> str | None:
        """The backends' instructions, each under its name."""
        parts = [f"{name}: {link.instructions}" for name, link in self._links.items()
                 if link.instructions]
        return "\n\n".join(parts) if parts else None

    def calling(self, link: BackendLink) -> _Calling:
        """``with links.calling(link)``: count a call in flight on ``link`` for the block (what
        retiring it waits for)."""
        return _Calling(self._calls_on, link)

    # --- what the backends have of their own -------------------------------------------------

    async def admitted(self, backend: str, request: Request, params: dict[str, Any],
                       hints: Mapping[str, Any] = NO_ANNOTATIONS
                       ) -> dict[str, Any] | ErrorResponse:
        """What ``backend`` has of its own on ``request`` for this session's caller, as sent
        to it (``params``: under the backend's names; ``hints``: the tool's annotations): the
        params to send (its webhooks may change them), or the refusal."""
        gate = self.services.gate
        if gate is None:
            return params
        return await gate.admit_at(self._caller(), backend, request, params, hints)

    # --- connecting -------------------------------------------------------------------------------

    async def connect_all(self, supervisor: Supervisor) -> list[str]:
        """Connect to every backend at once, each within the opening's deadline
        (``open_seconds``); the backends that did not answer by then (in ``failed`` meanwhile),
        for the session to join later."""
        late: list[str] = []
        async with trio.open_nursery() as connecting:
            for backend in self.services.plan.backends:
                connecting.start_soon(self._connect_within, backend.name, supervisor, late)
        return late

    async def _connect_within(self, name: str, supervisor: Supervisor, late: list[str]) -> None:
        deadline = self.services.open_seconds
        with trio.move_on_after(deadline):
            await self.connect(name, supervisor)
            return
        self.failed[name] = f"did not answer within {deadline:g}s"
        self.left_out |= {name}
        late.append(name)
        log.warning("session %s: backend %s did not answer within %gs; the session opens "
                    "without it, and it joins when it answers", self.owner[:8], name, deadline)

    async def connect(self, name: str, supervisor: Supervisor,
                      into: dict[str, BackendLink] | None = None) -> None:
        """Connect to a backend: its link in ``into`` (default: this session's links), or why
        not in ``failed``."""
        try:
            link = await self._open(name, supervisor)
            (self._links if into is None else into)[name] = link
            self.failed.pop(name, None)
            self.left_out -= {name}
        except BackendError as exc:
            self.failed[name] = exc.detail
            if not self.services.health.known_up(name):
                self.left_out |= {name}
            log.warning("session %s: %s", self.owner[:8], exc)

    async def _open(self, name: str, supervisor: Supervisor) -> BackendLink:
        health = self.services.health
        if not health.usable(name):
            raise BackendError(name, f"is unhealthy ({health.backends[name].last_error})")
        joined = self.joined.backends.get(name) if self.joined is not None else None
        link = None
        if joined is not None and (negotiated := revision(joined.revision)) is not None:
            link = self.services.links.join(
                name, (joined.session_id, negotiated, joined.server_capabilities,
                       joined.server_info, joined.instructions),
                capabilities=self._capabilities, sink=self._sink(name), caller=self._caller,
                supervisor=supervisor)
        if link is None:
            link = await self.services.links.open(
                name, owner=self.owner, capabilities=self._capabilities, sink=self._sink(name),
                caller=self._caller, supervisor=supervisor)
            if self.joined is not None:
                self._changed()  # a backend session the record did not name
        if isinstance(link, HttpBackendLink):
            link.on_new_session = self._changed
        return link

    async def reconnect_failed(self, supervisor: Supervisor) -> None:
        """Try again the usable backends this session could not connect to."""
        async with trio.open_nursery() as nursery:
            for name in list(self.failed):
                if self.services.health.usable(name):
                    nursery.start_soon(self.connect, name, supervisor)

    async def change(self, supervisor: Supervisor, gone: set[str], new: set[str],
                     swapped: Callable[[], None]) -> None:
        """A reload: links to ``gone`` backends leave at once, ``new`` ones are connected and
        swapped in (``swapped`` is told when the links are as the new plan wants), then the
        retired links close as their calls finish."""
        retired = [self._links.pop(name) for name in sorted(gone - new) if name in self._links]
        for name in gone - new:
            self.failed.pop(name, None)
        fresh: dict[str, BackendLink] = {}
        async with trio.open_nursery() as connecting:
            for name in sorted(new):
                connecting.start_soon(self.connect, name, supervisor, fresh)
        for name in sorted(new):
            old = self._links.pop(name, None)
            if old is not None:
                retired.append(old)
            if name in fresh:
                self._links[name] = fresh[name]
        swapped()
        async with trio.open_nursery() as retiring:
            for link in retired:
                retiring.start_soon(self._retire, link)

    async def _retire(self, link: BackendLink) -> None:
        with trio.move_on_after(self.services.links.timeout(link.name)):
            while self._calls_on[link]:
                await trio.sleep(0.05)
        with trio.CancelScope(shield=True), contextlib.suppress(Exception):
            await link.aclose()

    async def aclose(self, *, ending: bool) -> None:
        """Close every link (shielded); a copy that is not ``ending`` the session lets go of
        the backend sessions it joined instead (another replica may go on with them)."""
        with trio.CancelScope(shield=True):
            for link in self._links.values():
                if not ending and isinstance(link, HttpBackendLink):
                    link.release()
                    continue
                with contextlib.suppress(Exception):
                    await link.aclose()


class _Calling:
    """:meth:`SessionLinks.calling`'s block (a class, not a generator: it is on every call's
    path, where a generator-based context manager costs three times as much)."""

    __slots__ = ("_calls_on", "_link")

    def __init__(self, calls_on: Counter[BackendLink], link: BackendLink) -> None:
        self._calls_on = calls_on
        self._link = link

    def __enter__(self) -> None:
        self._calls_on[self._link] += 1

    def __exit__(self, *exc_info: object) -> None:
        calls_on, link = self._calls_on, self._link
        calls_on[link] -= 1
        if not calls_on[link]:
            del calls_on[link]
