"""The ``vmcp proxy`` command line's flags: every flag and default of the seed's table.

Only the flags: building the parser imports nothing heavy (``vmcp --help`` stays fast);
:mod:`.options` checks what they say and makes the settings. List flags (``--oidc-scopes``,
``--remote-auth-scopes``, ``--token-exchange-scopes``) take comma-separated values and may be
repeated. Besides the seed's flags, the process flags ``vmcp serve`` has: ``--log-format``,
``--log-level``, ``--drain-delay``, ``--shutdown-grace``, ``--max-body-bytes``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..runtime.log_levels import add_log_flags

__all__ = ["CLIENT_SECRET_VARIABLE", "SUBJECT_TOKEN_TYPES", "configure_incoming",
           "configure_listener", "configure_parser"]

CLIENT_SECRET_VARIABLE = "SERVICE_REMOTE_OAUTH_CLIENT_SECRET"
SUBJECT_TOKEN_TYPES = {"access_token": "urn:ietf:params:oauth:token-type:access_token",
                       "id_token": "urn:ietf:params:oauth:token-type:id_token"}


def configure_parser(parser: argparse.ArgumentParser, *, duration: Callable[[str], float],
                     incoming: bool = True) -> None:
    """Add the flags of ``vmcp proxy`` to ``parser``, without the incoming-auth ones when
    ``incoming`` is false (``proxy stdio`` and ``proxy tunnel`` have no listener to protect);
    ``duration`` reads a Go duration (``30s``, ``2m30s``) as seconds."""
    add = parser.add_argument
    add("--target-uri", required=True, metavar="URL", help="URI of the target MCP server")
    add_log_flags(parser)
    if incoming:
        configure_incoming(parser)
    remote = parser.add_argument_group("outgoing auth (to the remote server)")
    remote.add_argument("--remote-auth", action="store_true",
                        help="enable OAuth/OIDC to the remote server")
    remote.add_argument("--remote-auth-issuer", metavar="URL",
                        help="OAuth/OIDC issuer for the remote server")
    remote.add_argument("--remote-auth-authorize-url", metavar="URL",
                        help="authorization endpoint, alternative to the issuer for non-OIDC "
                             "OAuth")
    remote.add_argument("--remote-auth-token-url", metavar="URL",
                        help="token endpoint, alternative to the issuer for non-OIDC OAuth")
    remote.add_argument("--remote-auth-client-id",
                        help="client identifier; optional when dynamic client registration is "
                             "supported")
    remote.add_argument("--remote-auth-client-secret",
                        help="client secret; optional with dynamic registration or PKCE (not "
                             f"for production: use the file or {CLIENT_SECRET_VARIABLE})")
    remote.add_argument("--remote-auth-client-secret-file", metavar="PATH",
                        help="file holding the client secret")
    remote.add_argument("--remote-auth-client-key-file", metavar="PATH",
                        help="PEM private key the client authenticates with instead of a "
                             "secret (private_key_jwt, RFC 7523)")
    remote.add_argument("--remote-auth-client-metadata-url", metavar="URL",
                        help="the https URL of your Client ID Metadata Document: the client id "
                             "where the authorization server accepts such documents, instead "
                             "of registering")
    remote.add_argument("--remote-auth-authorize-param", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="an extra parameter of the authorization request (audience=..., "
                             "prompt=consent); repeatable")
    remote.add_argument("--remote-auth-idp-token-url", metavar="URL",
                        help="enterprise-managed authorization (ID-JAG): the token endpoint of "
                             "your identity provider, where --remote-auth-id-token-file's ID "
                             "token is exchanged for a grant the remote's authorization server "
                             "takes")
    remote.add_argument("--remote-auth-idp-client-id",
                        help="your client id at the identity provider (with "
                             "--remote-auth-idp-token-url)")
    remote.add_argument("--remote-auth-id-token-file", metavar="PATH",
                        help="file holding your ID token from the identity provider (read at "
                             "each exchange, so a sign-in agent may keep it fresh)")
    remote.add_argument("--remote-auth-assertion-file", metavar="PATH",
                        help="workload identity: a JWT this workload holds (a projected "
                             "service account token...), read at each request, for the token "
                             "(the JWT-bearer grant, RFC 7523)")
    remote.add_argument("--remote-auth-device-code", action="store_true",
                        help="log in on another device: a URL and a code to enter there are "
                             "printed, no browser or callback here (RFC 8628)")
    remote.add_argument("--remote-auth-client-credentials", action="store_true",
                        help="no user: the client_credentials grant as --remote-auth-client-id "
                             "(with its secret or key), asked again before the token expires")
    remote.add_argument("--remote-auth-bearer-token",
                        help="bearer token, alternative to OAuth")
    remote.add_argument("--remote-auth-bearer-token-file", metavar="PATH",
                        help="file holding the bearer token")
    remote.add_argument("--remote-auth-callback-port", type=int, default=8666,
                        help="port of the local OAuth callback server (default: %(default)s)")
    remote.add_argument("--remote-auth-resource", metavar="URI",
                        help="OAuth 2.0 resource indicator (RFC 8707) (default: the target's "
                             "canonical URI)")
    remote.add_argument("--remote-auth-scope-param-name", metavar="NAME",
                        help="overrides the query parameter name carrying scopes in the "
                             "authorization URL")
    remote.add_argument("--remote-auth-scopes", action="append", metavar="SCOPES",
                        help="scopes requested (OIDC default: openid,profile,email)")
    remote.add_argument("--remote-auth-skip-browser", action="store_true",
                        help="do not open a browser for the OAuth flow")
    remote.add_argument("--remote-auth-timeout", type=duration, default="30s",
                        metavar="DURATION", help="timeout of the OAuth flow (default: 30s)")
    remote.add_argument("--remote-auth-allow-private", action="store_true",
                        help="the remote's authorization server may be reached over plain http "
                             "and at private addresses (an in-cluster server; implied when "
                             "the target or the configured issuer is on loopback)")
    headers = parser.add_argument_group("headers and token exchange")
    headers.add_argument("--remote-forward-headers", action="append", default=[],
                         metavar="NAME=VALUE",
                         help="header injected into requests to the remote server; repeatable")
    headers.add_argument("--remote-forward-headers-secret", action="append", default=[],
                         metavar="NAME=SECRET",
                         help="header whose value comes from the secrets manager (vmcp "
                              "secret); repeatable")
    headers.add_argument("--remote-forward-headers-file", metavar="PATH",
                         help="headers injected into requests to the remote server, one "
                              "'Name: Value' per line (# comments); ${VAR} in a value (here "
                              "and in --remote-forward-headers) is the environment variable")
    headers.add_argument("--token-exchange-url", metavar="URL",
                         help="token exchange endpoint (RFC 8693); enables token exchange")
    headers.add_argument("--token-exchange-audience",
                         help="target audience of exchanged tokens")
    headers.add_argument("--token-exchange-client-id", help="client identifier for the exchange")
    headers.add_argument("--token-exchange-client-secret", help="client secret for the exchange")
    headers.add_argument("--token-exchange-client-secret-file", metavar="PATH",
                         help="file holding that secret")
    headers.add_argument("--token-exchange-header-name", metavar="NAME",
                         help="custom header carrying the exchanged token (default: replaces "
                              "the Authorization header)")
    headers.add_argument("--token-exchange-scopes", action="append", metavar="SCOPES",
                         help="scopes requested")
    headers.add_argument("--token-exchange-subject-token-type", choices=tuple(SUBJECT_TOKEN_TYPES),
                         default="access_token",
                         help="access_token or id_token (default: %(default)s)")
    process = parser.add_argument_group("process")
    process.add_argument("--drain-delay", type=duration, default="5s", metavar="DURATION",
                         help="after SIGTERM/SIGINT, how long requests are still forwarded "
                              "(default: 5s)")
    process.add_argument("--shutdown-grace", type=duration, default="30s", metavar="DURATION",
                         help="after SIGTERM/SIGINT, how long requests in flight have to "
                              "finish (default: 30s)")
    process.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024,
                         help="largest request body (default: %(default)s)")


def configure_stdio(parser: argparse.ArgumentParser, *,
                    duration: Callable[[str], float]) -> None:
    """The flags only ``vmcp proxy stdio`` has: what its client sees of the remote, and how the
    session is kept alive."""
    bridge = parser.add_argument_group("the stdio client's view")
    bridge.add_argument("--ignore-tool", action="append", default=[], metavar="GLOB",
                        help="hide the remote's tools whose names match (case-insensitive, * "
                             "for any run of characters) and refuse calls to them; repeatable")
    bridge.add_argument("--keep-alive", action="store_true",
                        help="ping the remote every 30s (or --ping-interval) while the session "
                             "is open")
    bridge.add_argument("--ping-interval", type=duration, metavar="DURATION",
                        help="ping the remote this often (implies --keep-alive)")
    bridge.add_argument("--transport", choices=("auto", "streamable-http", "sse"),
                        default="auto",
                        help="the remote's transport: auto tries Streamable HTTP and falls back "
                             "to HTTP+SSE (2024-11-05) when the remote refuses it as an older "
                             "server does (default: auto)")
    bridge.add_argument("--protocol", choices=("handshake", "auto"), default="handshake",
                        help="auto: a client's initialize first asks the remote server/discover; "
                             "a remote that speaks only 2026-07-28 is then bridged for the "
                             "handshake client (default: handshake, forwarded as it is)")
    bridge.add_argument("--connect-timeout", type=duration, metavar="DURATION",
                        help="longest wait to connect to the remote (TCP and TLS)")
    bridge.add_argument("--headers-timeout", type=duration, metavar="DURATION",
                        help="longest wait for the remote's response head after a request")
    bridge.add_argument("--body-timeout", type=duration, metavar="DURATION",
                        help="longest wait for more of a response body (an event stream "
                             "quiet that long is reopened)")


def configure_incoming(parser: argparse.ArgumentParser) -> None:
    """The incoming-auth flags (``vmcp proxy``; ``vmcp tunnel relay`` for its public side)."""
    incoming = parser.add_argument_group("incoming auth (protecting the public endpoint)")
    incoming.add_argument("--oidc-issuer", metavar="URL",
                          help="issuer URL for validating incoming requests")
    incoming.add_argument("--oidc-audience", help="expected audience of incoming tokens")
    incoming.add_argument("--oidc-client-id", help="OIDC client identifier")
    incoming.add_argument("--oidc-client-secret",
                          help="optional; for introspection of opaque tokens")
    incoming.add_argument("--oidc-introspection-url", metavar="URL",
                          help="token introspection endpoint")
    incoming.add_argument("--oidc-jwks-url", metavar="URL", help="JWKS location")
    incoming.add_argument("--oidc-scopes", action="append", metavar="SCOPES",
                          help="scopes advertised in the well-known endpoint (RFC 9728) "
                               "(default: openid)")
    incoming.add_argument("--resource-url", metavar="URL",
                          help="explicit resource URL for OAuth discovery (RFC 9728)")


def configure_listener(parser: argparse.ArgumentParser) -> None:
    """The flags of a proxy that listens (``vmcp proxy``): address and server name."""
    parser.add_argument("--host", default="127.0.0.1",
                        help="listen host (IP or hostname) (default: %(default)s)")
    parser.add_argument("--port", type=int, default=0,
                        help="listen port; 0 picks a free one (default: %(default)s)")
    parser.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                        help="a browser Origin allowed besides same-origin; repeatable")
    parser.add_argument("server_name", metavar="SERVER_NAME",
                        help="name of the remote server (labels logs and the stored login)")
