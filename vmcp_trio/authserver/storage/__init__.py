"""What the embedded authorization server keeps between requests, and the storage contract.

Records (all with an expiry; storage drops them after it):

* :class:`RegisteredClient`: a client registered with RFC 7591 (its metadata, and the SHA-256 of
  its secret for a confidential client). A registration that has not completed a login yet
  (``used`` false) is one of at most ``max_unused_clients``: a newer one pushes the oldest
  out, so a flood of registrations that are never used costs bounded memory and never locks
  registration.
* :class:`PendingAuthorization`: an ``/oauth/authorize`` in progress, keyed by the internal state
  of its current upstream leg (a fresh one per leg, single use: :meth:`Storage.take_pending`).
* :class:`CodeGrant`: an issued authorization code, keyed by the code's id. Redeemed once; a
  second redemption finds it marked used, which revokes what the first one issued.
* :class:`RefreshFamily`: the chain of refresh tokens of one grant. Only the newest id is valid;
  presenting an older one (reuse after rotation) revokes the family.
* Used assertions: the key of each RFC 7523 assertion accepted (a hash of its issuer and
  ``jti``), until the assertion expires, so that it is accepted once
  (:meth:`Storage.consume_assertion`), by whichever process sharing the storage sees it first.
* Upstream tokens per (session, provider): what the user's upstream logins returned, for the
  outgoing ``upstreamInject``/token-exchange strategies, with the client id that obtained them.
  A storage that persists them outside the process must encrypt them at rest.
* :class:`UpstreamClient`: vmcp's registrations at upstream providers (``dcrConfig``), by
  client id and by what they were registered for; encrypted at rest too (a client secret).

``session_id`` (the ``tsid`` claim of our access tokens) ties an access token to its upstream
tokens. A revoked session (a replayed code, a reused refresh token) makes its access tokens
invalid before their ``exp``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ...runtime.shared_storage import StorageUnavailable

__all__ = ["MAX_SUCCESSORS", "MAX_UNUSED_CLIENTS", "ROTATION_GRACE", "CodeGrant",
           "PendingAuthorization", "RefreshFamily", "RegisteredClient", "Storage", "StorageFull",
           "StorageUnavailable", "StoredUpstream", "UpstreamClient"]


ROTATION_GRACE = 10.0
"""Seconds during which the refresh token a rotation replaced may be presented again, as long
as none of its successors was used: a client whose answer was lost (a network error, a Redis
failover between the write and the reply) retries with the token it still holds, and that is
not reuse; nor is a client that refreshed at two replicas at once. Each such retry issues one
more successor, and every unused successor stays valid until one of them is used (the client
keeps whichever answer it kept: the first, the last, one of its concurrent requests'), at most
:data:`MAX_SUCCESSORS` of them (the oldest goes). No retry extends the grace. The replaced
token after the grace, or after a successor was used, the other successors once one was used,
and any older token, revoke the family: reuse is still detected, one use later at most."""

MAX_SUCCESSORS = 4
"""Unused successors of one refresh token kept valid at once (concurrent refreshes or retries
of the same token within :data:`ROTATION_GRACE`)."""


MAX_UNUSED_CLIENTS = 2_000
"""Registrations kept that have not completed a login (about 30 KB each at the most metadata
a registration may carry: 60 MB in all, at worst)."""


class StorageFull(StorageUnavailable):
    """A bounded table is full of live records and refuses more rather than drop one (a login
    in progress, a registered client); the message says which."""


@dataclass(frozen=True)
class RegisteredClient:
    client_id: str
    redirect_uris: tuple[str, ...]
    token_endpoint_auth_method: str
    grant_types: tuple[str, ...]
    client_name: str | None
    scope: str | None
    secret_sha256: str | None
    """Hex SHA-256 of the client secret (confidential clients); the secret is never stored."""
    created_at: float
    expires_at: float
    application_type: str = "web"
    """OpenID Connect Registration's ``application_type`` ("web" or "native"), as registered."""
    used: bool = False
    """A login of this client completed (until then it may be pushed out by newer unused
    registrations)."""


@dataclass(frozen=True)
class StoredUpstream:
    session_id: str
    provider: str
    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    expires_at: float | None
    scope: str | None
    subject: str
    issued_at: float | None = None
    """When the provider issued the access token (its lifetime sets the refresh margin)."""
    id_token: str | None = field(default=None, repr=False)
    """The provider's ID token (oidc providers), a possible token-exchange subject."""
    issuer: str | None = None
    """The issuer these tokens came from (:attr:`UpstreamProvider.issuer`): they are used and
    refreshed only while the provider of that name still has this issuer (MCP 2026-07-28:
    credentials are keyed by the authorization server's issuer). None in records written
    before it was kept."""
    client_id: str | None = None
    """vmcp's client id at the provider when these tokens were obtained: they are refreshed
    as that client only (a provider binds refresh tokens to the client). None in records
    written before it was kept: the provider's client then."""


@dataclass(frozen=True)
class UpstreamClient:
    """vmcp's own registration at an upstream provider (RFC 7591, ``dcrConfig``), shared by the
    processes of the storage: one registration per provider and settings, not one per replica
    or restart. Kept while tokens obtained with it may still be refreshed."""

    provider: str
    client_id: str
    client_secret: str | None = field(repr=False)
    auth_method: str
    """How the client authenticates at the token endpoint (``client_secret_basic``,
    ``client_secret_post`` or ``none``)."""
    fingerprint: str
    """What it was registered for (the registration settings, the redirect URI, the scopes),
    hashed: a change of any of them registers anew, and tokens of the old registration go on
    refreshing with it."""
    secret_expires_at: float | None
    """When the provider said the secret expires (``client_secret_expires_at``), None: never."""
    kept_until: float


@dataclass
class PendingAuthorization:
    state: str
    """The internal state of the current upstream leg (the key)."""
    client_id: str
    redirect_uri: str
    client_state: str | None
    code_challenge: str
    scopes: tuple[str, ...]
    resource: str | None
    session_id: str
    providers: tuple[str, ...]
    leg: int
    verifier: str = field(repr=False)
    nonce: str | None
    expires_at: float
    subject: str | None = None
    """The user's internal id, once the first leg named them."""
    name: str | None = None
    email: str | None = None
    upstream: list[StoredUpstream] = field(default_factory=list, repr=False)
    """The tokens of the legs finished so far: stored only once the whole chain is done."""
    upstream_client_id: str | None = None
    """vmcp's client id at the current leg's provider (its code is redeemed as that client)."""


@dataclass
class CodeGrant:
    code_id: str
    client_id: str
    redirect_uri: str
    code_challenge: str
    scopes: tuple[str, ...]
    resource: str | None
    subject: str
    session_id: str
    name: str | None
    email: str | None
    expires_at: float
    used: bool = False
    family_id: str | None = None
    """The refresh family the redemption created (revoked if the code is replayed)."""


@dataclass
class RefreshFamily:
    family_id: str
    current_id: str
    client_id: str
    subject: str
    session_id: str
    scopes: tuple[str, ...]
    resource: str | None
    name: str | None
    email: str | None
    expires_at: float
    revoked: bool = False
    previous_id: str | None = None
    previous_until: float = 0.0
    successors: tuple[str, ...] = ()
    """The other unused successors of ``previous_id`` besides ``current_id`` (issued to
    retries within the grace): each is as valid as ``current_id`` until one of them is used."""

    def is_current(self, token_id: str) -> bool:
        """``token_id`` is a refresh token of this family that may be used now."""
        return token_id == self.current_id or token_id in self.successors


class Storage(Protocol):
    """Every method may raise :class:`StorageUnavailable`."""

    on_revoked: Callable[[str, float], None] | None
    """Told ``(session id, until)`` of sessions that other processes sharing the storage
    revoked (a storage shared by replicas broadcasts them)."""

    async def unreachable(self) -> str | None:
        """Why the storage cannot serve now (for readiness), or None: it can."""
        ...

    async def put_client(self, client: RegisteredClient) -> None:
        """Keep ``client``; while it is not ``used``, among the newest
        :data:`MAX_UNUSED_CLIENTS` unused ones (the oldest unused is forgotten)."""
        ...
    async def get_client(self, client_id: str) -> RegisteredClient | None: ...

    async def put_pending(self, pending: PendingAuthorization) -> None: ...
    async def take_pending(self, state: str) -> PendingAuthorization | None:
        """The pending authorization of this leg state, removed (single use)."""
        ...

    async def put_code(self, grant: CodeGrant) -> None: ...
    async def redeem_code(self, code_id: str) -> tuple[CodeGrant | None, bool]:
        """``(grant, first)``: the grant and whether this is its first redemption (it is
        marked used either way, and kept until it expires so that a replay is recognised)."""
        ...
    async def set_code_family(self, code_id: str, family_id: str) -> None: ...

    async def put_family(self, family: RefreshFamily) -> None: ...
    async def get_family(self, family_id: str) -> RefreshFamily | None: ...
    async def rotate(self, family_id: str, presented_id: str, new_id: str,
                     expires_at: float) -> RefreshFamily | None:
        """Atomically: if ``presented_id`` is current (:meth:`RefreshFamily.is_current`), make
        ``new_id`` current alone and return the family; if it is the one those replaced, within
        :data:`ROTATION_GRACE`, add ``new_id`` to the current ones (:data:`ROTATION_GRACE`);
        otherwise (reuse, or revoked) revoke the family and return None."""
        ...
    async def revoke_family(self, family_id: str) -> None: ...

    async def put_upstream(self, tokens: StoredUpstream, expires_at: float) -> None: ...
    async def get_upstream(self, session_id: str, provider: str) -> StoredUpstream | None: ...
    async def drop_session(self, session_id: str, until: float) -> None:
        """Forget the session's upstream tokens and remember it as revoked until ``until``."""
        ...
    async def session_revoked(self, session_id: str) -> bool: ...

    async def due_upstreams(self, before: float, limit: int) -> list[tuple[str, str]]:
        """``(session id, provider)`` of stored upstream tokens with a refresh token that expire
        before ``before``, soonest first."""
        ...
    async def put_upstream_client(self, client: UpstreamClient, *, as_current: bool) -> None:
        """Keep ``client`` until its ``kept_until``; ``as_current``: as the registration of its
        fingerprint too."""
        ...
    async def get_upstream_client(self, provider: str, client_id: str) -> UpstreamClient | None:
        ...
    async def registered_upstream_client(self, provider: str,
                                         fingerprint: str) -> UpstreamClient | None:
        """The registration last kept for ``fingerprint``."""
        ...
    async def consume_assertion(self, key: str, expires_at: float) -> bool:
        """Atomically: True the first time ``key`` is presented before ``expires_at`` (then kept
        until then), False every other time: exactly one of concurrent presentations, at any
        process sharing the storage, is the first."""
        ...
    async def acquire(self, name: str, ttl: float) -> str | None:
        """A lock shared by every process of this storage: a token when taken, else None."""
        ...
    async def release(self, name: str, token: str) -> None: ...
