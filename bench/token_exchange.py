"""The token-exchange cache: exchanges made, and what it saves per call, in one run.

1,000 tools/call by 50 concurrent clients of 5 users (10 clients, one session each, per user)
through vmcp, whose one backend (bench/floor_backend.py) gets an RFC 8693-exchanged token. The
exchange service is a stand-in written here (a stdlib HTTP server: no installable program
offers RFC 8693); it counts the exchanges it answers. Two gateway runs, same load: with the
cache (the default), and with ``--no-token-exchange-cache`` (an exchange per backend request,
as ToolHive does).

Figures: exchanges made per (user, audience) with the cache (target: 1 per token lifetime, and
the tokens here outlive the run), exchanges without it, and the call latency p50/p99 and
throughput of both, as ratios.

Run: ``python bench/token_exchange.py [--calls 1000] [--users 5] [--clients 50]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import jwt as pyjwt
import trio
from common import (  # type: ignore[import-not-found]
    emit,
    fixed_calls,
    free_port,
    gateway_config,
    jwks_server,
    rsa_jwk,
    server_and_load_cpus,
    started,
)
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "https://issuer.example"
AUDIENCE = "https://mcp.example/mcp"


@contextmanager
def exchange_service() -> Iterator[tuple[str, Counter[str]]]:
    """The stand-in RFC 8693 service: any subject, a fresh opaque token valid 10 minutes."""
    seen: Counter[str] = Counter()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            form = parse_qs(self.rfile.read(int(self.headers["content-length"])).decode())
            subject = hashlib.sha256(form["subject_token"][0].encode()).hexdigest()[:12]
            seen[f"{subject}:{form['audience'][0]}"] += 1
            body = json.dumps({"access_token": secrets.token_urlsafe(32), "token_type": "Bearer",
                               "issued_token_type":
                                   "urn:ietf:params:oauth:token-type:access_token",
                               "expires_in": 600}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token", seen
    finally:
        server.shutdown()


def incoming(jwks_url: str) -> str:
    return (f"{{type: oidc, oidcConfig: {{type: inline, inline: {{issuer: '{ISSUER}', "
            f"audience: '{AUDIENCE}', clientId: bench, jwksUrl: '{jwks_url}', "
            "insecureAllowHTTP: true, jwksAllowPrivateIP: true}}}")


def exchange_config(token_url: str) -> str:
    return f"""---
apiVersion: v1
kind: Secret
metadata: {{name: sts}}
stringData: {{secret: bench-secret}}
---
apiVersion: toolhive.stacklok.dev/v1alpha1
kind: MCPExternalAuthConfig
metadata: {{name: floor-exchange}}
spec:
  type: tokenExchange
  tokenExchange: {{tokenUrl: '{token_url}', clientId: vmcp, audience: floor-api,
                  clientSecretRef: {{name: sts, key: secret}}, insecureAllowHTTP: true}}
"""


def run(args: argparse.Namespace, *, cache: bool, backend_url: str, token_url: str,
        jwks_url: str, auths: list[bytes], seen: Counter[str],
        server_cpu: int) -> dict[str, Any]:
    config = gateway_config(backend_url, incoming(jwks_url))
    text = config.read_text().replace(
        "spec: {groupRef: {name: bench}, url:",
        "spec: {groupRef: {name: bench}, externalAuthConfigRef: {name: floor-exchange}, url:")
    config.write_text(text + exchange_config(token_url))
    port = free_port()
    command = [sys.executable, "-m", "vmcp_trio", "serve", "--drain-delay", "0s",
               "--config", str(config), "--port",
               str(port)] + ([] if cache else ["--no-token-exchange-cache"])
    seen.clear()
    try:
        with started(command, cpu=server_cpu, ready_line="MCP endpoint"):
            result = trio.run(lambda: fixed_calls(f"http://127.0.0.1:{port}/mcp", auths=auths,
                                                  calls=args.calls))
    finally:
        config.unlink()
    if result.errors:
        raise SystemExit(f"{result.errors} calls failed (cache={cache})")
    return {"calls": result.calls, "rps": round(result.rate, 1),
            "p50_ms": round(result.percentile(0.5) * 1e3, 3),
            "p99_ms": round(result.percentile(0.99) * 1e3, 3),
            "exchanges": sum(seen.values()),
            "max_exchanges_per_user_audience": max(seen.values(), default=0)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--users", type=int, default=5)
    parser.add_argument("--clients", type=int, default=50)
    args = parser.parse_args()
    server_cpu, load_cpu = server_and_load_cpus()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    tokens = [pyjwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": f"user-{i}", "iat": now,
                            "exp": now + 3600, "jti": secrets.token_hex(8)}, key,
                           algorithm="RS256", headers={"kid": "bench", "typ": "at+jwt"})
              for i in range(args.users)]
    auths = [f"authorization: Bearer {tokens[i % args.users]}\r\n".encode()
             for i in range(args.clients)]
    floor = [sys.executable, "bench/floor_backend.py", "--port", "0"]
    with jwks_server({"keys": [rsa_jwk(key.public_key(), "bench")]}) as jwks_url, \
            exchange_service() as (token_url, seen), \
            started(floor, cpu=load_cpu, ready_line="listening") as (_, line):
        common = {"backend_url": line.split()[-1], "token_url": token_url,
                  "jwks_url": jwks_url, "auths": auths, "seen": seen,
                  "server_cpu": server_cpu}
        cached = run(args, cache=True, **common)
        uncached = run(args, cache=False, **common)
    print(f"with the cache: {cached}\nwithout: {uncached}", file=sys.stderr)
    pairs = args.users  # one audience
    emit("token_exchange", {"calls": args.calls, "users": args.users, "clients": args.clients,
                            "cached": cached, "uncached": uncached}, {
        "exchanges_per_user_audience_cached": round(cached["exchanges"] / pairs, 2),
        "exchanges_per_user_audience_uncached": round(uncached["exchanges"] / pairs, 2),
        "p50_uncached_vs_cached": round(uncached["p50_ms"] / cached["p50_ms"], 2),
        "p99_uncached_vs_cached": round(uncached["p99_ms"] / cached["p99_ms"], 2),
        "rps_cached_vs_uncached": round(cached["rps"] / uncached["rps"], 2)})


if __name__ == "__main__":
    main()
