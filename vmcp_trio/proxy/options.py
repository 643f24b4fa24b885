"""What the ``vmcp proxy`` flags say, checked, as :class:`~.settings.ProxySettings`.

Rules it keeps:

* A secret comes from the first source that has it: the flag (a warning: it shows in the process
  list), the file (one line; trailing whitespace dropped), then the environment variable where
  the seed names one (``SERVICE_REMOTE_OAUTH_CLIENT_SECRET``, the seed's rule 5).
  ``--remote-forward-headers-secret`` values come from the secrets manager
  (:mod:`vmcp_trio.secrets`). ``--remote-forward-headers-file`` holds ``Name: Value`` lines
  (blank lines and ``#`` comments skipped); a ``${VAR}`` in its values and in
  ``--remote-forward-headers`` is that environment variable, and a variable that is not set is
  an error (a header is never sent with the placeholder in it).
* What cannot work is refused before anything starts, in one line naming the flag (exit 2): a
  target that is not an absolute http(s) URL, an issuer or endpoint on plain http that is not a
  loopback address (allowed there with a warning, for local development), ``--oidc-issuer``
  without an audience (``--oidc-audience``, or ``--resource-url`` as the MCP spec makes the
  canonical resource the audience), two outgoing credentials for ``Authorization``, token
  exchange without incoming auth (its subject is the validated incoming token), an injected
  header the proxy must not send (:func:`~.headers.check_injected`), a secret that cannot be
  read.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from ..auth.signing import SigningKey, SigningKeyError, load_signing_key
from ..auth.ssrf import is_loopback_host, is_loopback_url
from ..http.client import Deadlines
from ..resources.plan import OIDCIncoming, SecretValue, TokenExchangeAuth
from ..secrets.errors import SecretsError
from ..secrets.manager import SecretsManager
from .command import CLIENT_SECRET_VARIABLE, SUBJECT_TOKEN_TYPES
from .headers import check_injected, parse_injected
from .settings import ProxySettings, RemoteAuthSettings

__all__ = ["DEFAULT_PING_INTERVAL", "incoming_from", "settings_from", "state_dir"]

DEFAULT_PING_INTERVAL = 30.0
"""``--keep-alive`` without ``--ping-interval`` (mcp-remote's default too)."""


def _scopes(values: Sequence[str] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    return tuple(dict.fromkeys(s.strip() for v in values for s in v.split(",") if s.strip()))


def state_dir(environ: Mapping[str, str]) -> str:
    """``$XDG_STATE_HOME/vmcp`` (``~/.local/state/vmcp`` when unset or relative)."""
    base = environ.get("XDG_STATE_HOME", "")
    if not base.startswith("/"):
        base = str(Path.home() / ".local" / "state")
    return str(Path(base) / "vmcp")


class _Checker:
    def __init__(self, error: Callable[[str], NoReturn], warn: Callable[[str], None],
                 environ: Mapping[str, str]) -> None:
        self.error = error
        self.warn = warn
        self.environ = environ

    def url(self, flag: str, value: str | None) -> str | None:
        """An absolute http(s) URL; plain http only on loopback (warned)."""
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            self.error(f"{flag} must be an absolute http(s) URL, not {value[:200]!r}")
        if parts.scheme == "http":
            if not is_loopback_host(parts.hostname):
                self.error(f"{flag} must use https (plain http is allowed only on loopback "
                           "addresses)")
            self.warn(f"{flag} uses plain http on loopback: for local development only")
        return value

    def secret(self, flag: str, value: str | None, path: str | None,
               variable: str | None = None) -> str | None:
        """The first source that has it: the flag (warned), the file, the variable."""
        if value:
            self.warn(f"{flag} puts a secret in the process list; use {flag}-file"
                      + (f" or {variable}" if variable else "") + " in production")
            return value
        if path:
            try:
                text = Path(path).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                self.error(f"{flag}-file {path}: cannot read it: "
                           f"{getattr(exc, 'strerror', None) or exc}")
            if not text:
                self.error(f"{flag}-file {path} is empty")
            return text
        if variable and self.environ.get(variable):
            return self.environ[variable]
        return None


def settings_from(args: argparse.Namespace, *, environ: Mapping[str, str] | None = None,
                  error: Callable[[str], NoReturn], warn: Callable[[str], None]
                  ) -> ProxySettings:
    """The settings the flags say, or ``error`` with one line naming the flag."""
    environ = os.environ if environ is None else environ
    check = _Checker(error, warn, environ)
    target = urlsplit(args.target_uri)
    if target.scheme not in ("http", "https") or not target.hostname:
        error(f"--target-uri must be an absolute http(s) URL, not {args.target_uri[:200]!r}")
    host = getattr(args, "host", "127.0.0.1")
    port = getattr(args, "port", 0)
    if not 0 <= port <= 65535:
        error("--port must be between 0 and 65535")
    if args.max_body_bytes < 1:
        error("--max-body-bytes must be at least 1")
    incoming = _incoming(args, check) if hasattr(args, "oidc_issuer") else None
    bearer = check.secret("--remote-auth-bearer-token", args.remote_auth_bearer_token,
                          args.remote_auth_bearer_token_file)
    remote = _remote_auth(args, check)
    if bearer is not None and remote is not None:
        error("--remote-auth and --remote-auth-bearer-token are alternatives: give one")
    exchange = _token_exchange(args, check, incoming)
    authorization_in_use = bearer is not None or remote is not None or (
        exchange is not None and exchange.header_name is None)
    if exchange is not None and exchange.header_name is None and (bearer or remote):
        error("--token-exchange-url replaces Authorization, which the remote credential "
              "already sets: give --token-exchange-header-name")
    injected = _injected(args, check, authorization_in_use)
    return ProxySettings(
        server_name=getattr(args, "server_name", "stdio"), target_uri=args.target_uri,
        host=host, port=port, allowed_origins=tuple(getattr(args, "allowed_origin", ())),
        incoming=incoming,
        scopes_supported=_scopes(getattr(args, "oidc_scopes", None)) or ("openid",),
        bearer_token=bearer, remote_auth=remote, token_exchange=exchange,
        bearer_token_file=None if args.remote_auth_bearer_token
        else args.remote_auth_bearer_token_file,
        injected_headers=injected, state_dir=state_dir(environ),
        max_body_bytes=args.max_body_bytes, drain_delay=args.drain_delay,
        shutdown_grace=args.shutdown_grace, **_stdio(args, check))


def _stdio(args: argparse.Namespace, check: _Checker) -> dict[str, Any]:
    """The settings of ``proxy stdio``'s own flags (none for the other commands)."""
    interval = getattr(args, "ping_interval", None)
    if interval is not None and interval <= 0:
        check.error("--ping-interval must be more than 0s")
    if interval is None and getattr(args, "keep_alive", False):
        interval = DEFAULT_PING_INTERVAL
    for pattern in getattr(args, "ignore_tool", ()):
        if not pattern.strip("*"):
            check.error(f"--ignore-tool {pattern!r} would hide every tool")
    phases = {}
    for flag, phase in (("connect_timeout", "connect"), ("headers_timeout", "head"),
                        ("body_timeout", "body_idle")):
        value = getattr(args, flag, None)
        if value is not None and value <= 0:
            check.error(f"--{flag.replace('_', '-')} must be more than 0s")
        phases[phase] = value
    return {"ignored_tools": tuple(getattr(args, "ignore_tool", ())),
            "ping_interval": interval, "deadlines": Deadlines(**phases),
            "dual_era": getattr(args, "protocol", "handshake") == "auto",
            "transport": getattr(args, "transport", "auto")}


def incoming_from(args: argparse.Namespace, *, error: Callable[[str], NoReturn],
                  warn: Callable[[str], None]) -> OIDCIncoming | None:
    """The incoming auth the ``--oidc-*`` flags say (``vmcp tunnel relay`` has only those)."""
    return _incoming(args, _Checker(error, warn, os.environ))


def _incoming(args: argparse.Namespace, check: _Checker) -> OIDCIncoming | None:
    issuer = check.url("--oidc-issuer", args.oidc_issuer)
    if issuer is None:
        for flag in ("oidc_audience", "oidc_client_id", "oidc_client_secret",
                     "oidc_introspection_url", "oidc_jwks_url"):
            if getattr(args, flag):
                check.error(f"--{flag.replace('_', '-')} needs --oidc-issuer")
        return None
    resource = check.url("--resource-url", args.resource_url)
    audience = args.oidc_audience or resource
    if not audience:
        check.error("--oidc-issuer needs --oidc-audience (or --resource-url, the audience "
                    "MCP clients ask tokens for): tokens for other services must not pass")
    if args.oidc_client_secret and not args.oidc_client_id:
        check.error("--oidc-client-secret needs --oidc-client-id (introspection "
                    "authenticates as that client)")
    on_loopback = is_loopback_url(issuer)
    return OIDCIncoming(
        issuer=issuer, audience=audience, client_id=args.oidc_client_id,
        client_secret=SecretValue("--oidc-client-secret", args.oidc_client_secret.encode())
        if args.oidc_client_secret else None,
        jwks_url=check.url("--oidc-jwks-url", args.oidc_jwks_url),
        introspection_url=check.url("--oidc-introspection-url", args.oidc_introspection_url),
        scopes=_scopes(args.oidc_scopes) or ("openid",), resource_url=resource,
        jwks_allow_private_ip=on_loopback, insecure_allow_http=on_loopback)


def _remote_auth(args: argparse.Namespace, check: _Checker) -> RemoteAuthSettings | None:
    if not args.remote_auth:
        for flag in ("remote_auth_issuer", "remote_auth_authorize_url", "remote_auth_token_url",
                     "remote_auth_client_id", "remote_auth_client_secret",
                     "remote_auth_client_secret_file", "remote_auth_client_key_file",
                     "remote_auth_client_credentials", "remote_auth_client_metadata_url",
                     "remote_auth_authorize_param", "remote_auth_idp_token_url",
                     "remote_auth_idp_client_id", "remote_auth_id_token_file",
                     "remote_auth_device_code", "remote_auth_assertion_file",
                     "remote_auth_resource",
                     "remote_auth_scopes", "remote_auth_scope_param_name",
                     "remote_auth_allow_private"):
            if getattr(args, flag):
                check.error(f"--{flag.replace('_', '-')} needs --remote-auth")
        return None
    authorize = check.url("--remote-auth-authorize-url", args.remote_auth_authorize_url)
    token = check.url("--remote-auth-token-url", args.remote_auth_token_url)
    without_user = bool(args.remote_auth_client_credentials or args.remote_auth_assertion_file
                        or args.remote_auth_idp_token_url)
    if authorize and not token:
        check.error("--remote-auth-authorize-url needs --remote-auth-token-url")
    if token and not authorize and not without_user:
        check.error("--remote-auth-token-url alone is for the logins without a user "
                    "(--remote-auth-client-credentials, --remote-auth-assertion-file, "
                    "--remote-auth-idp-token-url): a browser login needs "
                    "--remote-auth-authorize-url too")
    if (authorize or token) and not args.remote_auth_client_id:
        check.error("--remote-auth-authorize-url needs --remote-auth-client-id (without "
                    "metadata there is no registration endpoint)")
    if not 0 <= args.remote_auth_callback_port <= 65535:
        check.error("--remote-auth-callback-port must be between 0 and 65535")
    if not args.remote_auth_timeout > 0:
        check.error("--remote-auth-timeout must be more than 0s")
    secret = check.secret("--remote-auth-client-secret", args.remote_auth_client_secret,
                          args.remote_auth_client_secret_file, CLIENT_SECRET_VARIABLE)
    if secret and not args.remote_auth_client_id:
        check.error("a remote client secret needs --remote-auth-client-id")
    key = _client_key(args.remote_auth_client_key_file, check)
    if key is not None and not args.remote_auth_client_id:
        check.error("--remote-auth-client-key-file needs --remote-auth-client-id")
    if key is not None and secret:
        check.error("--remote-auth-client-key-file and a client secret are alternatives: give "
                    "one")
    if args.remote_auth_client_credentials and (
            not args.remote_auth_client_id or (key is None and not secret)):
        check.error("--remote-auth-client-credentials needs --remote-auth-client-id and its "
                    "secret (--remote-auth-client-secret-file) or key "
                    "(--remote-auth-client-key-file)")
    idp = check.url("--remote-auth-idp-token-url", args.remote_auth_idp_token_url)
    enterprise = (idp, args.remote_auth_idp_client_id, args.remote_auth_id_token_file)
    if any(enterprise) and not all(enterprise):
        check.error("--remote-auth-idp-token-url, --remote-auth-idp-client-id and "
                    "--remote-auth-id-token-file go together (enterprise-managed "
                    "authorization)")
    if idp and not args.remote_auth_client_id:
        check.error("--remote-auth-idp-token-url needs --remote-auth-client-id (the client the "
                    "grant is for, at the remote's authorization server)")
    if sum(map(bool, (idp, args.remote_auth_client_credentials, args.remote_auth_device_code,
                      args.remote_auth_assertion_file))) > 1:
        check.error("--remote-auth-device-code, --remote-auth-client-credentials, "
                    "--remote-auth-idp-token-url and --remote-auth-assertion-file are "
                    "alternatives: give one")
    if args.remote_auth_assertion_file and not args.remote_auth_client_id:
        check.error("--remote-auth-assertion-file needs --remote-auth-client-id (the workload's "
                    "client at the authorization server)")
    return RemoteAuthSettings(
        issuer=check.url("--remote-auth-issuer", args.remote_auth_issuer),
        idp_token_url=idp, idp_client_id=args.remote_auth_idp_client_id,
        id_token_file=args.remote_auth_id_token_file,
        device_code=args.remote_auth_device_code,
        assertion_file=args.remote_auth_assertion_file,
        authorize_url=authorize, token_url=token, client_id=args.remote_auth_client_id,
        client_secret=secret, client_key=key,
        client_metadata_url=_client_metadata_url(args.remote_auth_client_metadata_url, check),
        authorize_params=_authorize_params(args.remote_auth_authorize_param, check),
        client_credentials=args.remote_auth_client_credentials,
        scopes=_scopes(args.remote_auth_scopes),
        resource=args.remote_auth_resource,
        scope_param_name=args.remote_auth_scope_param_name or "scope",
        callback_port=args.remote_auth_callback_port,
        skip_browser=args.remote_auth_skip_browser, timeout=args.remote_auth_timeout,
        allow_private=args.remote_auth_allow_private)


_FLOW_PARAMS = {"response_type": None, "client_id": "--remote-auth-client-id",
                "redirect_uri": None, "state": None, "code_challenge": None,
                "code_challenge_method": None, "scope": "--remote-auth-scopes",
                "resource": "--remote-auth-resource"}
"""Authorization request parameters the login sets itself (and the flag that sets it)."""


def _authorize_params(specs: Sequence[str], check: _Checker) -> tuple[tuple[str, str], ...]:
    flag = "--remote-auth-authorize-param"
    params: list[tuple[str, str]] = []
    for spec in specs:
        key, sep, value = spec.partition("=")
        key = key.strip()
        if not sep or not key:
            check.error(f"{flag} {spec[:100]!r}: not KEY=VALUE")
        if key in _FLOW_PARAMS:
            instead = _FLOW_PARAMS[key]
            check.error(f"{flag} {key}: the login sets it itself"
                        + (f" (use {instead})" if instead else ""))
        params.append((key, value))
    return tuple(params)


def _client_metadata_url(url: str | None, check: _Checker) -> str | None:
    """A Client ID Metadata Document's URL: https with a path (what a client id must be)."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname or parts.path in ("", "/") \
            or parts.fragment or parts.username or parts.password:
        check.error(f"--remote-auth-client-metadata-url must be an https URL with a path and "
                    f"no fragment or credentials, not {url[:200]!r}")
    return url


def _client_key(path: str | None, check: _Checker) -> SigningKey | None:
    """``--remote-auth-client-key-file``: the client's PEM private key."""
    if path is None:
        return None
    flag = "--remote-auth-client-key-file"
    try:
        pem = Path(path).read_bytes()
    except OSError as exc:
        check.error(f"{flag} {path}: cannot read it: {exc.strerror or exc}")
    try:
        return load_signing_key(pem)
    except SigningKeyError as exc:
        check.error(f"{flag} {path}: {str(exc).removeprefix('signing key 0: ')}")


def _token_exchange(args: argparse.Namespace, check: _Checker,
                    incoming: OIDCIncoming | None) -> TokenExchangeAuth | None:
    url = check.url("--token-exchange-url", args.token_exchange_url)
    if url is None:
        for flag in ("token_exchange_audience", "token_exchange_client_id",
                     "token_exchange_client_secret", "token_exchange_client_secret_file",
                     "token_exchange_header_name", "token_exchange_scopes"):
            if getattr(args, flag):
                check.error(f"--{flag.replace('_', '-')} needs --token-exchange-url")
        return None
    if incoming is None:
        check.error("--token-exchange-url needs incoming auth (--oidc-issuer): the token it "
                    "exchanges is the validated incoming one")
    secret = check.secret("--token-exchange-client-secret", args.token_exchange_client_secret,
                          args.token_exchange_client_secret_file)
    header = args.token_exchange_header_name
    if header is not None:
        try:
            parse_injected(f"{header}=x")
        except ValueError as exc:
            check.error(f"--token-exchange-header-name: {exc}")
        refused = check_injected(header, authorization_in_use=False)
        if refused is not None and header.lower() != "authorization":
            check.error(f"--token-exchange-header-name {header}: {refused}")
        if header.lower() == "authorization":
            header = None
    return TokenExchangeAuth(
        config="--token-exchange-url", token_url=url,
        audience=args.token_exchange_audience or "", client_id=args.token_exchange_client_id,
        client_secret=SecretValue("--token-exchange-client-secret", secret.encode())
        if secret else None, scopes=_scopes(args.token_exchange_scopes) or (),
        subject_token_type=SUBJECT_TOKEN_TYPES[args.token_exchange_subject_token_type],
        header_name=header)


_VARIABLE = re.compile(r"\$\{([^}]*)\}")


def _expanded(where: str, value: str, check: _Checker) -> str:
    """``value`` with each ``${VAR}`` replaced by that environment variable (a missing one is
    an error naming it: a header is never sent with the placeholder in it)."""
    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in check.environ:
            check.error(f"{where}: the environment variable {name[:100]!r} is not set")
        return check.environ[name]
    return _VARIABLE.sub(variable, value)


def _header_file(path: str, check: _Checker) -> list[tuple[str, str]]:
    """``--remote-forward-headers-file``: ``(flag and line, Name=Value)`` of each line."""
    flag = "--remote-forward-headers-file"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        check.error(f"{flag} {path}: cannot read it: {getattr(exc, 'strerror', None) or exc}")
    specs = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, colon, value = stripped.partition(":")
        if not colon:
            check.error(f"{flag} {path}:{number}: not 'Name: Value'")
        specs.append((f"{flag} {path}:{number}", f"{name.strip()}={value.strip()}"))
    return specs


def _injected(args: argparse.Namespace, check: _Checker,
              authorization_in_use: bool) -> tuple[tuple[str, str], ...]:
    headers: list[tuple[str, str]] = []
    specs = [("--remote-forward-headers", spec) for spec in args.remote_forward_headers]
    if args.remote_forward_headers_file:
        specs += _header_file(args.remote_forward_headers_file, check)
    specs += [("--remote-forward-headers-secret", spec)
              for spec in args.remote_forward_headers_secret]
    manager: SecretsManager | None = None
    for flag, spec in specs:
        try:
            name, value = parse_injected(spec)
        except ValueError as exc:
            check.error(f"{flag}: {exc}")
        if flag != "--remote-forward-headers-secret":
            value = _expanded(f"{flag} {name}", value, check)
            if any(c in value for c in "\r\n\0"):
                check.error(f"{flag} {name}: the value holds a line break or NUL")
        refused = check_injected(name, authorization_in_use=authorization_in_use)
        if refused is not None:
            check.error(f"{flag} {name}: refused: {refused}")
        if any(existing.lower() == name.lower() for existing, _ in headers):
            check.error(f"{flag} {name}: the header is given twice")
        if flag == "--remote-forward-headers-secret":
            try:
                manager = manager or SecretsManager.from_environment(check.environ)
                value = manager.get(value)
            except SecretsError as exc:
                check.error(f"{flag} {name}: {exc}")
            if any(c in value for c in "\r\n\0"):
                check.error(f"{flag} {name}: the secret holds a line break or NUL")
        headers.append((name, value))
    return tuple(headers)
