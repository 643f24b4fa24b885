"""Refreshing stored upstream tokens ahead of expiry, so that no request waits for it.

A supervised task of the authorization server. Every ``tick`` it asks the storage for the
upstream tokens that expire within the refresh margin (a third of their lifetime, at most two
minutes, with ±10% jitter so that replicas and tokens issued together spread out), and for each:

1. takes the lock ``refresh:<session>:<provider>`` in the storage (shared by every replica with
   Redis storage; a replica that does not get it skips the token: another one is refreshing);
2. reads the token again (another replica may have refreshed it between the query and the lock;
   then there is nothing to do);
3. calls the provider's refresh grant as the client that obtained the token, asking for the
   scope it was granted (:meth:`UpstreamProvider.refresh`), and stores the new tokens, keeping
   the old refresh token when the provider sends none;
4. releases the lock.

Stored tokens are keyed by issuer (MCP 2026-07-28): tokens that another issuer issued than the
one their provider name has now (a reload pointed it elsewhere) are never sent to it; that ends
the login session, as a refusal does. A provider that refuses the refresh token
(``invalid_grant``: revoked, expired, rotated away) ends the user's login session: its upstream
tokens are dropped and the session revoked, so the client's next request gets 401 with a
``WWW-Authenticate`` challenge and logs in again, rather than backends failing one by one; so
does a token whose client is no longer vmcp's (a reload changed the ``clientId``): it would be
refused as another client's. A token of an older *registration* (``dcrConfig``, before a
change of scopes) is refreshed with that registration, and goes on working.
Other failures (the provider down) are retried at the next tick while the token lasts.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping

import trio

from .storage import Storage, StorageUnavailable, StoredUpstream
from .upstream import RegistrationGone, UpstreamError, UpstreamProvider

__all__ = ["UpstreamRefresher"]

log = logging.getLogger("vmcp.authserver.refresh")

MAX_MARGIN = 120.0
LOCK_TTL = 30.0
BATCH = 100


def margin(lifetime: float) -> float:
    """How long before expiry a token of this lifetime is refreshed (jittered)."""
    return min(MAX_MARGIN, lifetime / 3) * (0.9 + 0.2 * random.random())  # noqa: S311


class UpstreamRefresher:
    def __init__(self, storage: Storage, providers: Mapping[str, UpstreamProvider], *,
                 end_session: Callable[[str], Awaitable[None]], tick: float = 1.0,
                 keep_for: float = 7 * 24 * 3600.0,
                 on_outcome: Callable[[str, str], None] | None = None) -> None:
        self.storage = storage
        self.providers = providers
        self.end_session = end_session
        self.tick = tick
        self.keep_for = keep_for
        self.refreshes = 0
        """Refreshes this process made (for metrics and tests)."""
        self.on_outcome = on_outcome
        """Told ``(provider, "ok" | "refused" | "failed")`` of every refresh attempt."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Every tick, the refreshes due (a supervised task: a crash is restarted)."""
        task_status.started()
        while True:
            try:
                await self.refresh_due()
            except StorageUnavailable as exc:
                log.warning("upstream refresh: %s", exc)
            await trio.sleep(self.tick)

    async def refresh_due(self) -> None:
        now = time.time()
        for session, provider in await self.storage.due_upstreams(now + MAX_MARGIN, BATCH):
            stored = await self.storage.get_upstream(session, provider)
            if stored is None or stored.expires_at is None or not stored.refresh_token:
                continue
            lifetime = stored.expires_at - (stored.issued_at or now - MAX_MARGIN * 3)
            if stored.expires_at - now > margin(lifetime):
                continue
            await self._refresh(session, provider, lifetime)

    def _count(self, provider: str, outcome: str) -> None:
        if self.on_outcome is not None:
            self.on_outcome(provider, outcome)

    async def _refresh(self, session: str, provider_name: str, lifetime: float) -> None:
        lock = f"refresh:{session}:{provider_name}"
        token = await self.storage.acquire(lock, LOCK_TTL)
        if token is None:
            return  # another replica is on it
        try:
            stored = await self.storage.get_upstream(session, provider_name)  # read again
            now = time.time()
            if (stored is None or stored.expires_at is None or not stored.refresh_token
                    or stored.expires_at - now > margin(lifetime)):
                return
            provider = self.providers.get(provider_name)
            if provider is None:
                return
            if stored.issuer is not None and stored.issuer != provider.issuer:
                # Keyed by issuer: a refresh token is never sent to another issuer than the
                # one that issued it (a reload pointed the provider name elsewhere).
                log.warning("the stored %s tokens of a session come from another issuer than "
                            "the one configured now; ending the session", provider_name)
                await self.end_session(session)
                return
            try:
                fresh = await provider.refresh(stored.refresh_token, client_id=stored.client_id,
                                               scope=stored.scope)
            except RegistrationGone as exc:
                self._count(provider_name, "refused")
                log.warning("%s; ending the session so that the user logs in again", exc)
                await self.end_session(session)
                return
            except UpstreamError as exc:
                self._count(provider_name, "refused" if exc.oauth_error == "invalid_grant"
                            else "failed")
                if exc.oauth_error == "invalid_grant":
                    log.warning("%s refused the refresh token of a session; ending it so that "
                                "the user logs in again", provider_name)
                    await self.end_session(session)
                else:
                    log.warning("refreshing a %s token failed (retrying): %s", provider_name,
                                exc)
                return
            self.refreshes += 1
            self._count(provider_name, "ok")
            await self.storage.put_upstream(StoredUpstream(
                session_id=session, provider=provider_name, access_token=fresh.access_token,
                refresh_token=fresh.refresh_token or stored.refresh_token,
                expires_at=fresh.expires_at, scope=fresh.scope or stored.scope,
                subject=stored.subject, issued_at=now,
                id_token=fresh.id_token or stored.id_token, issuer=provider.issuer,
                client_id=stored.client_id),
                now + self.keep_for)
        finally:
            await self.storage.release(lock, token)
