"""The ``vmcp`` (and ``svc``) command line.

Exit codes: 0 success; 1 the configuration has errors (every one is listed); 2 usage or operator
error (unknown flag, missing argument, a ``--config`` path that does not exist, a port in use).

Each command imports the stacks it uses when it runs (the validation stack, the server, the
keys' cryptography), so ``vmcp --help`` starts in a few tens of milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from .app import status_command
from .completion import SHELLS, completion_script
from .defaults import (
    DEFAULT_API_GROUP,
    DEFAULT_BACKEND_URL_TEMPLATE,
    DEFAULT_NAMESPACE,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_USAGE,
    HMAC_FILE,
    SERVICE_ACCOUNT_DIR,
    SIGNING_KEY_FILE,
)
from .proxy import command as proxy_flags
from .runtime.log_levels import add_log_flags, chosen_level
from .secrets import command as secret_command

if TYPE_CHECKING:
    from .resources import LoadOptions, ValidationResult

__all__ = ["main"]


def _add_resource_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", action="append", required=True, metavar="PATH",
                        help="YAML or JSON file (one or more documents) or folder; repeatable")
    parser.add_argument("--name", metavar="[NAMESPACE/]NAME",
                        help="the VirtualMCPServer to use when the files hold several")
    parser.add_argument("--namespace",
                        help="namespace of documents without metadata.namespace "
                             f"(default: {DEFAULT_NAMESPACE})")
    parser.add_argument("--api-group", default=DEFAULT_API_GROUP,
                        help="API group of the resources' apiVersion (default: %(default)s)")
    parser.add_argument("--backend-url-template", default=DEFAULT_BACKEND_URL_TEMPLATE,
                        help="URL of an MCPServer with neither spec.url nor spec.command; "
                             "placeholders {name}, {namespace}, {port}; /mcp or /sse is "
                             "appended (default: %(default)s)")


def build_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command line's parser, and its ``serve`` command's (whose flags can also come from
    the environment)."""
    parser = argparse.ArgumentParser(
        prog="vmcp",
        description="vmcp-trio: one MCP endpoint over many MCP servers, with OAuth at both "
                    "boundaries.",
    )
    parser.add_argument("--version", action=_Version, help="print the version and the git "
                                                           "revision, and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    validate = commands.add_parser(
        "validate",
        help="check resource files and print the resolved plan",
        description="Check resource files; list every problem (exit 1) or print a summary of "
                    "the resolved plan (exit 0).",
    )
    _add_resource_options(validate)
    validate.add_argument("--output", "-o", choices=("text", "json"), default="text",
                          help="output format (default: %(default)s)")
    validate.set_defaults(handler=_validate, parser=validate)

    serve = commands.add_parser(
        "serve",
        help="run the Virtual MCP Server",
        description="Serve one VirtualMCPServer at http://HOST:PORT/mcp until SIGINT or SIGTERM.",
    )
    _add_resource_options(serve)
    serve.add_argument("--host", default="127.0.0.1", help="listen address (default: %(default)s)")
    serve.add_argument("--port", type=int, default=4483, help="listen port (default: %(default)s)")
    serve.add_argument("--diagnostics-port", type=int, metavar="PORT",
                       help="serve the status view (/ and /status.json) and the probes on this "
                            "port too (default: off; 0: a free port)")
    serve.add_argument("--diagnostics-host", default="127.0.0.1", metavar="HOST",
                       help="the status view's listen address (default: %(default)s)")
    serve.add_argument("--tls-cert", metavar="PEM", help="certificate chain for HTTPS")
    serve.add_argument("--tls-key", metavar="PEM", help="private key for HTTPS")
    add_log_flags(serve)
    serve.add_argument("--watch", action="store_true",
                       help="reload the configuration when its files change (polled every 2s; "
                            "SIGHUP reloads it too)")
    serve.add_argument("--session-ttl", type=float, default=1800.0, metavar="SECONDS",
                       help="end sessions idle this long (default: %(default)s)")
    serve.add_argument("--max-sessions", type=int, default=10_000,
                       help="most concurrent client sessions (default: %(default)s)")
    serve.add_argument("--max-sessions-per-client", type=int, default=100,
                       help="sessions one identity (anonymous: one address) may hold; past it "
                            "its longest-idle session is ended (default: %(default)s)")
    serve.add_argument("--max-requests-per-session", type=int, default=64,
                       help="requests of one session at work at once (default: %(default)s)")
    serve.add_argument("--max-stdio-calls-per-session", type=int, default=16,
                       help="calls one session may have in flight on a shared stdio backend "
                            "(default: %(default)s)")
    serve.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024,
                       help="largest request body (default: %(default)s)")
    serve.add_argument("--body-timeout", type=float, default=15.0, metavar="SECONDS",
                       help="time a request body may take once its headers arrived; 408 after "
                            "(default: %(default)s)")
    serve.add_argument("--max-batch", type=int, default=64,
                       help="messages in one JSON-RPC batch (2025-03-26) (default: "
                            "%(default)s)")
    serve.add_argument("--drain-delay", type=_seconds, default="5s", metavar="DURATION",
                       help="after SIGTERM/SIGINT, how long new sessions are still served while "
                            "readiness already says 503 (default: 5s)")
    serve.add_argument("--shutdown-grace", type=_seconds, default="30s", metavar="DURATION",
                       help="after SIGTERM/SIGINT, how long calls in flight have to finish "
                            "before each gets an error (default: 30s)")
    serve.add_argument("--idle-timeout", type=float, default=75.0, metavar="SECONDS",
                       help="close an HTTP connection idle this long (also bounds slow request "
                            "headers) (default: %(default)s)")
    serve.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                       help="a browser Origin allowed besides same-origin; repeatable")
    serve.add_argument("--allow-anonymous-on-network", action="store_true",
                       help="serve a gateway with anonymous incoming auth on an address other "
                            "than loopback (refused without it: anyone who reaches the port "
                            "could call every tool)")
    serve.add_argument("--auth-leeway", type=float, default=30.0, metavar="SECONDS",
                       help="clock skew allowed on token exp/nbf/iat (default: %(default)s)")
    serve.add_argument("--required-scope", action="append", default=[], metavar="SCOPE",
                       help="a scope every token must grant (else 403 insufficient_scope); "
                            "repeatable")
    serve.add_argument("--introspection-cache-ttl", type=float, default=60.0,
                       metavar="SECONDS", help="longest time an introspection answer is "
                                               "trusted (default: %(default)s)")
    serve.add_argument("--service-account-dir", default=SERVICE_ACCOUNT_DIR, metavar="DIR",
                       help="where the pod's service-account token and CA are mounted "
                            "(default: %(default)s)")
    serve.add_argument("--trust-forwarded-headers", action="store_true",
                       help="derive the resource URL from X-Forwarded-Proto/-Host (only behind "
                            "a proxy that sets them)")
    serve.add_argument("--no-token-exchange-cache", action="store_true",
                       help="exchange tokens on every backend request (for comparisons)")
    serve.set_defaults(handler=_serve, parser=serve)

    keys = commands.add_parser("keys", help="signing keys and HMAC secrets for authServerConfig")
    key_commands = keys.add_subparsers(dest="keys_command", required=True, metavar="COMMAND")
    generate = key_commands.add_parser(
        "generate",
        help="write a new signing key and HMAC secret",
        description="Write a new signing key and HMAC secret: as a Secret document on standard "
                    "output (default), or as two files with --output-dir.",
    )
    generate.add_argument("--key-type", choices=("ec", "rsa", "ed25519"), default="ec",
                          help="ec (P-256, ES256), rsa (RS256) or ed25519 (EdDSA) "
                               "(default: %(default)s)")
    generate.add_argument("--rsa-bits", type=int, choices=(2048, 3072, 4096), default=3072,
                          help="RSA key size (default: %(default)s)")
    generate.add_argument("--name", default="vmcp-auth-keys",
                          help="name of the Secret document (default: %(default)s)")
    generate.add_argument("--namespace", help="namespace of the Secret document")
    generate.add_argument("--output-dir", metavar="DIR",
                          help=f"write {SIGNING_KEY_FILE} and {HMAC_FILE} here (mode 0600) "
                               "instead of printing a Secret; never overwrites")
    generate.set_defaults(handler=_keys_generate, parser=generate)

    proxy = commands.add_parser(
        "proxy",
        help="a transparent proxy to one remote MCP server, with OAuth both ways",
        description="Forward every request to --target-uri, authenticating to the remote "
                    "server (OAuth/OIDC login, a bearer token, token exchange, injected "
                    "headers) and optionally validating incoming tokens. Siblings: "
                    "'vmcp proxy stdio' (MCP over stdin/stdout) and 'vmcp proxy tunnel' "
                    "(through a relay).",
    )
    proxy_flags.configure_listener(proxy)
    proxy_flags.configure_parser(proxy, duration=_seconds)
    proxy.set_defaults(handler=_proxy, parser=proxy)
    stdio = commands.add_parser(  # named as typed: _parse joins `proxy stdio` into one word
        "proxy stdio", prog="vmcp proxy stdio",
        help="MCP over stdin/stdout for a desktop client, forwarded to the remote server",
        description="MCP over stdin/stdout for a local client (a desktop app's stdio server "
                    "entry), forwarded to --target-uri with the remote-auth and header flags "
                    "of 'vmcp proxy'. Logs go to stderr.")
    proxy_flags.configure_parser(stdio, duration=_seconds, incoming=False)
    proxy_flags.configure_stdio(stdio, duration=_seconds)
    stdio.set_defaults(handler=_proxy_stdio, parser=stdio)

    tunnel_agent = commands.add_parser(
        "proxy tunnel", prog="vmcp proxy tunnel",
        help="expose an internal MCP server through a relay (vmcp tunnel relay)",
        description="Expose --target-uri through a relay (vmcp tunnel relay): connect out to "
                    "--relay-url and serve the relay's requests against the target, with the "
                    "remote-auth and header flags of 'vmcp proxy'.")
    tunnel_agent.add_argument("--relay-url", required=True, metavar="URL",
                              help="the relay's WebSocket URL (wss://relay.example.com)")
    tunnel_agent.add_argument("--tunnel-token-file", required=True, metavar="PATH",
                              help="file holding this tunnel's token (vmcp tunnel token)")
    tunnel_agent.add_argument("--metrics-host", default="127.0.0.1",
                              help="address of the agent's probes and /metrics (default: "
                                   "%(default)s)")
    tunnel_agent.add_argument("--metrics-port", type=int, metavar="PORT",
                              help="serve the agent's /health, /readyz (503 while not "
                                   "connected) and /metrics on this port (default: none)")
    tunnel_agent.add_argument("server_name", metavar="SERVER_NAME",
                              help="the tunnel's name (clients use {relay}/t/SERVER_NAME/...)")
    proxy_flags.configure_parser(tunnel_agent, duration=_seconds, incoming=False)
    tunnel_agent.set_defaults(handler=_proxy_tunnel, parser=tunnel_agent)

    tunnel = commands.add_parser("tunnel", help="the public relay of vmcp proxy tunnel, and "
                                                "its tokens")
    tunnel_commands = tunnel.add_subparsers(dest="tunnel_command", required=True,
                                            metavar="COMMAND")
    relay = tunnel_commands.add_parser(
        "relay", help="run the public relay",
        description="Serve tunnels: agents (vmcp proxy tunnel) connect a WebSocket to "
                    "/tunnel/NAME with their token; MCP clients reach each at /t/NAME/... "
                    "until SIGINT or SIGTERM.")
    relay.add_argument("--host", default="127.0.0.1", help="listen address (default: "
                                                           "%(default)s)")
    relay.add_argument("--port", type=int, default=0,
                       help="listen port; 0 picks a free one (default: %(default)s)")
    relay.add_argument("--tokens", required=True, metavar="FILE",
                       help="NAME:TOKEN or NAME:sha256:HEX lines, one per tunnel")
    relay.add_argument("--public-url", metavar="URL",
                       help="the relay's public URL, for the printed client URLs")
    relay.add_argument("--domain", metavar="DOMAIN",
                       help="also route the host NAME.DOMAIN to tunnel NAME (whole path)")
    relay.add_argument("--tls-cert", metavar="PEM", help="certificate chain for HTTPS/WSS")
    relay.add_argument("--tls-key", metavar="PEM", help="private key for HTTPS/WSS")
    add_log_flags(relay)
    proxy_flags.configure_incoming(relay)
    relay.set_defaults(handler=_tunnel_relay, parser=relay)
    token = tunnel_commands.add_parser(
        "token", help="print a new tunnel token and the relay's line for it",
        description="Print a new token for tunnel NAME: the line for the relay's --tokens "
                    "file (its hash only) and the token for the agent's --tunnel-token-file.")
    token.add_argument("name", metavar="NAME", help="the tunnel's name (a DNS label)")
    token.set_defaults(handler=_tunnel_token, parser=token)

    secret = commands.add_parser(
        "secret", help="the secrets manager behind --remote-forward-headers-secret and "
                       "Secret references",
        description="Store, read, list and delete secrets (an encrypted file whose key the "
                    "first set makes, overridden by VMCP_SECRET_<NAME> variables).")
    secret_command.configure_parser(secret)
    secret.set_defaults(handler=_secret, parser=secret)

    status = commands.add_parser(
        "status", help="print a running gateway's status view",
        description="Print what a running vmcp serve's status page shows (its backends, "
                    "sessions, catalog, configuration, fleet and recent requests), read from "
                    "its diagnostics listener (vmcp serve --diagnostics-port).")
    status_command.configure_parser(status)
    status.set_defaults(handler=_status, parser=status)

    version = commands.add_parser("version", help="print the version and the git revision",
                                  description="Print the version and the git revision of the "
                                              "source it runs (the same as vmcp --version).")
    version.set_defaults(handler=_version, parser=version)
    completion = commands.add_parser(
        "completion", help="print a shell completion script (bash or zsh)",
        description="Print a completion script for bash or zsh. bash: source <(vmcp completion "
                    "bash), or save it in ~/.local/share/bash-completion/completions/vmcp. zsh: "
                    "save it as _vmcp in a folder of $fpath.")
    completion.add_argument("shell", choices=SHELLS, help="the shell")
    completion.set_defaults(handler=_completion, parser=completion)
    return parser, serve


class _Version(argparse.Action):
    """``--version``: what ``vmcp version`` prints (the revision is looked up only then)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        _version(namespace, parser)
        parser.exit()


def _version(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .runtime.build import VERSION, revision

    print(f"vmcp {VERSION} (revision {revision()})")
    return EXIT_OK


def _status(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    return status_command.run(args)


def _completion(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    sys.stdout.write(completion_script(args.shell, build_parser()[0]))
    return EXIT_OK


def _seconds(text: str) -> float:
    """A Go duration (``30s``, ``1m30s``) as seconds, for argparse."""
    from .resources.durations import DurationError, parse_duration

    try:
        return parse_duration(text).total_seconds()
    except DurationError as exc:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} {exc}") from None


def _print_result(result: ValidationResult, name: str | None, fmt: str, out: TextIO) -> int:
    from .resources.summary import describe_plan

    plans = result.plans
    missing_name = False
    if name is not None and result.ok:
        plans = tuple(p for p in plans if p.answers_to(name))
        missing_name = not plans
    if fmt == "json":
        json.dump({
            "valid": result.ok and not missing_name,
            "documents": result.document_count,
            "unchecked": result.unchecked,
            "problems": [p.as_dict() for p in result.problems],
            "virtualMCPServers": [f"{p.namespace}/{p.name}" for p in plans],
        }, out, indent=2)
        out.write("\n")
    else:
        for problem in result.problems:
            out.write(f"{problem}\n")
        errors, warnings = len(result.errors), len(result.warnings)
        if result.problems:
            out.write("\n")
        if not result.ok:
            out.write(f"invalid: {errors} error(s), {warnings} warning(s) in "
                      f"{result.document_count} document(s)\n")
            if result.unchecked:
                out.write(f"note: {result.unchecked} resource(s) have field errors where "
                          "the rules between resources cannot read past them; fix these and "
                          "run again\n")
        elif missing_name:
            out.write(f"invalid: no VirtualMCPServer named {name!r} in the given files\n")
        else:
            out.write(f"valid: {result.document_count} document(s), {warnings} warning(s)\n")
            if not plans:
                out.write("(no VirtualMCPServer in the given files)\n")
            for plan in plans:
                out.write("\n" + describe_plan(plan) + "\n")
    return EXIT_OK if result.ok and not missing_name else EXIT_INVALID


def _load_options(args: argparse.Namespace, usage_error: Callable[[str], NoReturn]
                  ) -> LoadOptions:
    """What ``--api-group``, ``--namespace`` and ``--backend-url-template`` say, once
    ``--name`` (``NAME`` or ``NAMESPACE/NAME``) is checked against ``--namespace``."""
    from .resources import LoadOptions
    from .resources.resolver import check_url_template

    if args.name is not None:
        namespace, slash, name = args.name.rpartition("/")
        if not name or (slash and not namespace) or "/" in namespace:
            usage_error(f"--name must be NAME or NAMESPACE/NAME, not {args.name[:200]!r}")
        if slash and args.namespace is not None and namespace != args.namespace:
            usage_error(f"--name {args.name} and --namespace {args.namespace} name different "
                        "namespaces")
    problem = check_url_template(args.backend_url_template)
    if problem is not None:
        usage_error(f"--backend-url-template {problem}")
    return LoadOptions(api_group=args.api_group, namespace=args.namespace or DEFAULT_NAMESPACE,
                       backend_url_template=args.backend_url_template)


def _validate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .resources import ConfigPathError, validate_paths

    usage_error = _usage_errors("vmcp validate")
    options = _load_options(args, usage_error)
    try:
        result = validate_paths(args.config, options)
    except ConfigPathError as exc:
        usage_error(f"--config {exc}")
    return _print_result(result, args.name, args.output, sys.stdout)


def _serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .app.serve import ConfigSource, serve
    from .auth.incoming.build import AuthSettings
    from .gateway.settings import GatewaySettings

    _start_logging(args)
    usage_error = _usage_errors("vmcp serve")
    _check_listener(args, usage_error)
    for flag in ("max_sessions", "max_sessions_per_client", "max_requests_per_session",
                 "max_stdio_calls_per_session", "max_body_bytes", "max_batch"):
        if getattr(args, flag) < 1:
            usage_error(f"--{flag.replace('_', '-')} must be at least 1")
    for flag in ("body_timeout", "idle_timeout", "session_ttl"):
        if not getattr(args, flag) > 0:
            usage_error(f"--{flag.replace('_', '-')} must be more than 0 seconds")
    source = ConfigSource(tuple(args.config), _load_options(args, usage_error), args.name,
                          args.host, args.allow_anonymous_on_network)
    settings = GatewaySettings(
        host=args.host, port=args.port, session_idle_ttl=args.session_ttl,
        diagnostics_host=args.diagnostics_host, diagnostics_port=args.diagnostics_port,
        max_sessions=args.max_sessions, max_body_bytes=args.max_body_bytes,
        max_sessions_per_client=args.max_sessions_per_client,
        max_requests_per_session=args.max_requests_per_session,
        max_stdio_calls_per_session=args.max_stdio_calls_per_session,
        body_timeout_seconds=args.body_timeout, max_batch=args.max_batch,
        drain_delay_seconds=args.drain_delay, shutdown_grace_seconds=args.shutdown_grace,
        idle_connection_seconds=args.idle_timeout,
        allowed_origins=tuple(args.allowed_origin),
        trust_forwarded_headers=args.trust_forwarded_headers,
        token_exchange_cache=not args.no_token_exchange_cache,
        auth=AuthSettings(leeway=args.auth_leeway, required_scopes=tuple(args.required_scope),
                          introspection_cache_ttl=args.introspection_cache_ttl,
                          service_account_dir=args.service_account_dir))
    return serve(source, settings, tls_cert=args.tls_cert, tls_key=args.tls_key,
                 watch=args.watch, log_format=args.log_format, usage_error=usage_error)


def _proxy(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from functools import partial

    from .app.proxy import run_proxy
    from .app.running import run_server
    from .proxy.options import settings_from
    from .runtime.logs import say

    _start_logging(args)
    usage_error = _usage_errors("vmcp proxy")
    settings = settings_from(args, error=usage_error,
                             warn=lambda text: say(f"vmcp proxy: warning: {text}",
                                                   level="warning"))
    _configure_traces(usage_error)

    def ready(urls: list[str]) -> None:
        say(f"vmcp proxy: {settings.server_name}: {urls[0]} -> {settings.target_uri}\n"
            "  Connect an MCP client to that URL. Press Ctrl-C to stop.", stream=sys.stdout,
            url=urls[0], target=settings.target_uri)

    return run_server(partial(run_proxy, settings, on_ready=ready), "vmcp proxy")


def _proxy_stdio(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import trio

    from .app.proxy import run_stdio
    from .proxy.options import settings_from
    from .runtime import tracing
    from .runtime.logs import say

    _start_logging(args)
    usage_error = _usage_errors("vmcp proxy stdio")
    settings = settings_from(args, error=usage_error,
                             warn=lambda text: say(f"vmcp proxy stdio: warning: {text}",
                                                   level="warning"))
    _configure_traces(usage_error)
    say(f"vmcp proxy stdio: stdin/stdout -> {settings.target_uri}")
    try:
        trio.run(run_stdio, settings)
    finally:
        tracing.shutdown()
    return EXIT_OK


def _proxy_tunnel(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from functools import partial

    from .app.running import run_server
    from .app.tunnel import run_agent
    from .proxy.options import settings_from
    from .runtime.logs import say

    _start_logging(args)
    usage_error = _usage_errors("vmcp proxy tunnel")
    if not args.relay_url.startswith(("ws://", "wss://")):
        usage_error("--relay-url must be a ws:// or wss:// URL")
    try:
        token = Path(args.tunnel_token_file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        usage_error(f"--tunnel-token-file {args.tunnel_token_file}: cannot read it: "
                    f"{getattr(exc, 'strerror', None) or exc}")
    if not token:
        usage_error(f"--tunnel-token-file {args.tunnel_token_file} is empty")
    settings = settings_from(args, error=usage_error,
                             warn=lambda text: say(f"vmcp proxy tunnel: warning: {text}",
                                                   level="warning"))
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        usage_error("--metrics-port must be between 0 and 65535")
    say(f"vmcp proxy tunnel: {args.server_name}: {args.relay_url} -> {settings.target_uri}")
    status = (None if args.metrics_port is None
              else (args.metrics_host, args.metrics_port))
    return run_server(partial(run_agent, settings, args.relay_url, token,
                               status_listener=status,
                               on_status_ready=lambda urls: say(
                                   f"vmcp proxy tunnel: /health, /readyz and /metrics at {urls[0]}",
                                   url=urls[0])),
                       "vmcp proxy tunnel")


def _tunnel_relay(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from functools import partial

    from .app.running import run_server
    from .app.tunnel import build_relay, run_relay
    from .proxy.options import incoming_from
    from .runtime.logs import say
    from .tunnel.tokens import TokenFileError, TunnelTokens

    _start_logging(args)
    usage_error = _usage_errors("vmcp tunnel relay")
    _check_listener(args, usage_error)
    try:
        tokens = TunnelTokens.load(args.tokens)
    except TokenFileError as exc:
        usage_error(str(exc))
    if not tokens.names:
        usage_error(f"--tokens {args.tokens} lists no tunnel")

    def ready(urls: list[str]) -> None:
        public = (args.public_url or urls[0]).rstrip("/")
        agents = public.replace("https://", "wss://").replace("http://", "ws://")
        say(f"vmcp tunnel relay: {urls[0]} ({len(tokens.names)} tunnel(s))\n"
            f"  agents: vmcp proxy tunnel --relay-url {agents} ... NAME\n"
            f"  clients: {public}/t/NAME/mcp", stream=sys.stdout, url=urls[0])

    incoming = incoming_from(args, error=usage_error,
                             warn=lambda text: say(f"vmcp tunnel relay: warning: {text}",
                                                   level="warning"))
    relay = build_relay(tokens, incoming, domain=args.domain, public_url=args.public_url)
    return run_server(partial(run_relay, relay, args.host, args.port,
                               tls_cert=args.tls_cert, tls_key=args.tls_key, on_ready=ready,
                               load_tokens=partial(TunnelTokens.load, args.tokens)),
                       "vmcp tunnel relay")


def _tunnel_token(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .tunnel.tokens import new_token_line

    try:
        token, line = new_token_line(args.name)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"# for the relay's --tokens file:\n{line}\n"
          f"# for the agent's --tunnel-token-file (keep it secret):\n{token}")
    return EXIT_OK




def _start_logging(args: argparse.Namespace) -> None:
    """A server command's logging, from its ``--log-format``, ``--log-level`` and ``--debug``."""
    from .runtime.logs import configure_logging

    configure_logging(args.log_format, level=chosen_level(args))


def _check_listener(args: argparse.Namespace, usage_error: Callable[[str], NoReturn]) -> None:
    """A server's ``--port`` and ``--tls-cert``/``--tls-key``."""
    if bool(args.tls_cert) != bool(args.tls_key):
        usage_error("--tls-cert and --tls-key go together")
    for flag in ("port", "diagnostics_port"):
        port = getattr(args, flag, None)
        if port is not None and not 0 <= port <= 65535:
            usage_error(f"--{flag.replace('_', '-')} must be between 0 and 65535")


def _configure_traces(usage_error: Callable[[str], NoReturn]) -> None:
    from .app.running import TracesUnavailable, configure_traces

    try:
        configure_traces()
    except TracesUnavailable as exc:
        usage_error(str(exc))


def _usage_errors(command: str) -> Callable[[str], NoReturn]:
    """A usage error found once the flags are parsed (a value that cannot work, files that
    are not there): exit 2 with one line, ``COMMAND: error: ...`` (one JSON object with
    ``--log-format json``)."""
    from .runtime.logs import say

    def usage_error(message: str) -> NoReturn:
        say(f"{command}: error: {message}", level="error")
        raise SystemExit(EXIT_USAGE)

    return usage_error








def _secret(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    return secret_command.run(args, sys.stdin, sys.stdout, sys.stderr, os.environ)






def _keys_generate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .app.keys import KeyFileError, secret_document, write_key_files

    if args.output_dir is not None:
        try:
            written = write_key_files(Path(args.output_dir), args.key_type, args.rsa_bits)
        except KeyFileError as exc:
            parser.error(str(exc))
        for target in written:
            print(f"wrote {target}")
        return EXIT_OK
    _check_dns_name(parser, "--name", args.name)
    if args.namespace:
        _check_dns_name(parser, "--namespace", args.namespace)
    print(secret_document(args.name, args.namespace, args.key_type, args.rsa_bits))
    return EXIT_OK


def _check_dns_name(parser: argparse.ArgumentParser, flag: str, value: str) -> None:
    from .resources.fields import DNS_NAME_RULE, is_dns_subdomain

    if not is_dns_subdomain(value):
        parser.error(f"{flag} {DNS_NAME_RULE}")


_UNSET = object()
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _environment(parser: argparse.ArgumentParser, environ: Mapping[str, str]
                 ) -> dict[str, Any]:
    """The flags of ``parser`` given as ``VMCP_<FLAG>`` environment variables (upper case,
    dashes as underscores): ``{dest: value}``, each checked as its flag would be (a bad one is a
    usage error naming the variable). Repeatable flags take a comma-separated list, switches
    1/true/yes/on or 0/false/no/off. The actions are changed so that the command line can be
    told apart afterwards (:func:`_parse`): a flag on the command line wins."""
    found: dict[str, Any] = {}
    for action in parser._actions:  # argparse has no public view of its actions
        flag = next((o for o in action.option_strings if o.startswith("--")), None)
        if flag is None or action.dest == "help":
            continue
        variable = "VMCP_" + flag[2:].upper().replace("-", "_")
        raw = environ.get(variable)
        if raw is None:
            continue
        try:
            found[action.dest] = _from_text(action, raw)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            parser.error(f"{variable}: {exc}")
        action.required = False
        action.default = None if isinstance(action, argparse._AppendAction) else _UNSET
    return found


def _from_text(action: argparse.Action, raw: str) -> Any:
    if isinstance(action, argparse._StoreTrueAction):
        if raw.strip().lower() not in _TRUE + _FALSE:
            raise ValueError(f"{raw[:40]!r} is not one of {', '.join(_TRUE + _FALSE)}")
        return raw.strip().lower() in _TRUE
    convert: Callable[[str], Any] = action.type if callable(action.type) else str
    values = ([part.strip() for part in raw.split(",") if part.strip()]
              if isinstance(action, argparse._AppendAction) else [raw])
    converted = []
    for value in values:
        try:
            item = convert(value)
        except (TypeError, ValueError):
            raise ValueError(f"{value[:40]!r} is not a valid value") from None
        if action.choices is not None and item not in action.choices:
            raise ValueError(f"{value[:40]!r} is not one of {', '.join(map(str, action.choices))}")
        converted.append(item)
    return converted if isinstance(action, argparse._AppendAction) else converted[0]


def _parse(argv: Sequence[str] | None, environ: Mapping[str, str]) -> argparse.Namespace:
    """The command line, completed from ``VMCP_<FLAG>`` variables for ``vmcp serve``. (``vmcp
    proxy stdio`` is its own command: ``vmcp proxy`` takes a SERVER_NAME where it would be.)"""
    parser, serve = build_parser()
    from_environment = _environment(serve, environ)
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:2] in (["proxy", "stdio"], ["proxy", "tunnel"]):
        words[:2] = [f"proxy {words[1]}"]
    args = parser.parse_args(words)
    if args.command != "serve":
        return args
    for dest, value in from_environment.items():
        if getattr(args, dest) in (None, _UNSET):
            setattr(args, dest, value)
    if args.config is None:
        serve.error("the following arguments are required: --config/-c (or VMCP_CONFIG)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    # SIGUSR1 asks a running server for a memory census; one that arrives while it starts,
    # before its handler is installed, is ignored instead of ending the process (its default).
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    args = _parse(argv, os.environ)
    # A handler gets its own subparser, so its usage errors print that command's usage.
    try:
        return int(args.handler(args, args.parser))
    except BrokenPipeError:  # the reader left (`vmcp validate ... | head`): not our error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
