"""What one ``vmcp proxy`` process is told (its flags, checked), as plain values.

The command line (:mod:`vmcp_trio.cli`) makes a :class:`ProxySettings`; :mod:`vmcp_trio.app.proxy`
makes the process from it. Secrets are already read (from their flag, file or environment
variable) and kept out of ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..auth.signing import SigningKey
from ..http.client import Deadlines
from ..resources.plan import OIDCIncoming, TokenExchangeAuth

__all__ = ["ProxySettings", "RemoteAuthSettings"]


@dataclass(frozen=True)
class RemoteAuthSettings:
    """``--remote-auth``: how to log in to the remote server (:mod:`.remote_login`)."""

    issuer: str | None = None
    authorize_url: str | None = None
    token_url: str | None = None
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    client_key: SigningKey | None = field(default=None, repr=False)
    """``--remote-auth-client-key-file``: ``private_key_jwt`` instead of a secret."""
    client_metadata_url: str | None = None
    """``--remote-auth-client-metadata-url``: the client id where the authorization server
    takes Client ID Metadata Documents."""
    authorize_params: tuple[tuple[str, str], ...] = ()
    """``--remote-auth-authorize-param``: extra parameters of the authorization request."""
    idp_token_url: str | None = None
    """``--remote-auth-idp-token-url``: enterprise-managed authorization (an ID-JAG)."""
    idp_client_id: str | None = None
    id_token_file: str | None = None
    """Where the user's ID token at the identity provider is (read at each exchange)."""
    assertion_file: str | None = None
    """``--remote-auth-assertion-file``: workload identity, a JWT for the JWT-bearer grant."""
    device_code: bool = False
    """``--remote-auth-device-code``: the user approves on another device (RFC 8628)."""
    client_credentials: bool = False
    """``--remote-auth-client-credentials``: the token comes from the client_credentials grant
    (no user, no browser)."""
    scopes: tuple[str, ...] | None = None
    """None: the OIDC default with an issuer given, else the remote's challenge or metadata."""
    resource: str | None = None
    """The RFC 8707 resource indicator; None: the target's canonical URI."""
    scope_param_name: str = "scope"
    callback_port: int = 8666
    skip_browser: bool = False
    timeout: float = 30.0
    allow_private: bool = False
    """``--remote-auth-allow-private``: the authorization server may be reached over plain
    http and at private addresses, wherever a document names it."""


@dataclass(frozen=True)
class ProxySettings:
    server_name: str
    target_uri: str
    host: str = "127.0.0.1"
    port: int = 0
    incoming: OIDCIncoming | None = None
    """Incoming auth (``--oidc-*``); None: every request is forwarded."""
    scopes_supported: tuple[str, ...] = ("openid",)
    """``--oidc-scopes``, advertised in the RFC 9728 document."""
    bearer_token: str | None = field(default=None, repr=False)
    bearer_token_file: str | None = None
    """Where ``bearer_token`` was read (``--remote-auth-bearer-token-file``): it is re-read when
    it changes (:mod:`.token_file`); None: the token is fixed (the flag itself)."""
    remote_auth: RemoteAuthSettings | None = None
    token_exchange: TokenExchangeAuth | None = None
    injected_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """``--remote-forward-headers`` and the values of ``--remote-forward-headers-secret``."""
    allowed_origins: tuple[str, ...] = ()
    """Browser origins allowed besides same-origin (``--allowed-origin``)."""
    state_dir: str | None = None
    """Where the remote login is kept across restarts (``$XDG_STATE_HOME/vmcp``); None: not
    kept."""
    max_body_bytes: int = 4 * 1024 * 1024
    max_header_bytes: int = 64 * 1024
    body_timeout: float = 15.0
    idle_connection_seconds: float = 75.0
    drain_delay: float = 5.0
    shutdown_grace: float = 30.0
    ignored_tools: tuple[str, ...] = ()
    """``--ignore-tool`` (``proxy stdio``): tools its client neither sees nor calls."""
    deadlines: Deadlines = field(default_factory=Deadlines)
    """``--connect-timeout``, ``--headers-timeout``, ``--body-timeout`` (``proxy stdio``)."""
    ping_interval: float | None = None
    """``--keep-alive``/``--ping-interval`` (``proxy stdio``): seconds between pings."""
    transport: str = "auto"
    """``--transport`` (``proxy stdio``): auto, streamable-http or sse."""
    dual_era: bool = False
    """``--protocol auto`` (``proxy stdio``): bridge a handshake client to a remote that speaks
    only 2026-07-28."""
