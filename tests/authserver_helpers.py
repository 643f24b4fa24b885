"""Helpers for the authorization server tests: the configuration, its upstreams, and a raw OAuth
client.

* :func:`chained_upstreams`: two ``oidc-provider`` instances (corp, oidc; hub, oauth2 with
  userInfo) and the port vmcp must take; :func:`as_docs`: the quickstart behind the embedded
  authorization server with them as upstreams; :class:`Stack`: the issuer, the MCP URL, the
  upstreams and (in process) the gateway;
* the raw client: :func:`call` (one request, JSON or form), :func:`register`, :func:`pkce`,
  :func:`authorize_url`, :func:`login` (the chained headless login through both upstreams),
  :func:`tokens` (all of it, then the token endpoint), :func:`mcp_status` (what a token gets at
  /mcp) and :func:`claims_of`;
* clients known by their metadata document: :class:`DocumentServer` (:func:`document_server`,
  a small HTTP server of the documents) and :func:`login_as_document_client` (the consent page,
  then the chained login)."""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import html
import json
import re
import secrets
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlencode

import httpx2
import trio

from vmcp_trio.app.parts import GatewayProcess
from vmcp_trio.authserver.keygen import generate_hmac_secret, generate_signing_key

from .fixtures.idp import Idp, _next_step, browse, running_idp
from .gateway_helpers import RawClient, quickstart_docs, running_gateway
from .helpers import free_port

CLIENT_REDIRECT = "http://127.0.0.1:9/callback"


@dataclass
class Stack:
    issuer: str
    mcp: str
    corp: Idp
    hub: Idp
    gateway: GatewayProcess | None = None
    """The gateway when it runs in the test's process."""


def issuer_of(upstreams: tuple[int, Idp, Idp]) -> str:
    """The issuer of the gateway that listens on the port ``chained_upstreams`` chose."""
    return f"http://127.0.0.1:{upstreams[0]}"


def stack_of(upstreams: tuple[int, Idp, Idp], url: str, gateway: Any) -> Stack:
    """The stack of a gateway serving ``url`` on the upstreams' port."""
    _, corp, hub = upstreams
    return Stack(issuer_of(upstreams), url, corp, hub, gateway)


@contextlib.asynccontextmanager
async def running_stack(upstreams: tuple[int, Idp, Idp],
                        docs: list[dict[str, Any]]) -> AsyncIterator[Stack]:
    """A gateway of ``docs`` on the upstreams' port, in the test's process, as a stack."""
    async with running_gateway(docs, port=upstreams[0]) as (url, gateway):
        yield stack_of(upstreams, url, gateway)


def as_docs(issuer: str, corp: Idp, hub: Idp, *, storage: dict[str, Any] | None = None,
            keys: tuple[str, str] | None = None) -> list[dict[str, Any]]:
    """The quickstart behind the embedded authorization server with corp (oidc) and hub
    (oauth2 + userInfo) as upstreams. ``keys``: (signing key PEM, HMAC secret) to use, ``("",
    "")`` for none (ephemeral), default fresh ones. ``storage``: the ``storage`` block."""
    signing, hmac_secret = keys or (generate_signing_key("ec").decode(),
                                    generate_hmac_secret().decode())
    docs = copy.deepcopy(quickstart_docs())
    docs[:0] = [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "as-keys"},
         "stringData": {"key.pem": signing or "unused", "hmac": hmac_secret or "unused"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "upstreams"},
         "stringData": {"corp": corp.clients["confidential"].client_secret,
                        "hub": hub.clients["confidential"].client_secret}},
        {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPOIDCConfig",
         "metadata": {"name": "self"},
         "spec": {"type": "inline", "inline": {"issuer": issuer, "insecureAllowHTTP": True}}},
    ]
    vmcp = next(d for d in docs if d["kind"] == "VirtualMCPServer")
    vmcp["spec"]["incomingAuth"] = {"type": "oidc", "oidcConfigRef": {
        "name": "self", "audience": issuer + "/mcp", "scopes": ["mcp:tools"]}}
    vmcp["spec"]["authServerConfig"] = {
        "issuer": issuer, "insecureAllowHTTP": True,
        "upstreamProviders": [
            {"name": "corp", "type": "oidc", "oidcConfig": {
                "issuerUrl": corp.issuer, "clientId": "confidential",
                "clientSecretRef": {"name": "upstreams", "key": "corp"},
                "scopes": ["openid"]}},
            {"name": "hub", "type": "oauth2", "oauth2Config": {
                "authorizationEndpoint": hub.authorization_endpoint,
                "tokenEndpoint": hub.token_endpoint, "clientId": "confidential",
                "clientSecretRef": {"name": "upstreams", "key": "hub"},
                "scopes": ["openid"],
                "userInfo": {"endpointUrl": f"{hub.issuer}/me",
                             "fieldMapping": {"subjectFields": ["sub"]}}}},
        ]}
    if signing:
        vmcp["spec"]["authServerConfig"]["signingKeySecretRefs"] = [
            {"name": "as-keys", "key": "key.pem"}]
        vmcp["spec"]["authServerConfig"]["hmacSecretRefs"] = [{"name": "as-keys", "key": "hmac"}]
    if storage is not None:
        vmcp["spec"]["authServerConfig"]["storage"] = storage
    return docs


# --- a raw client of the authorization server ----------------------------------------------------

async def call(stack: Stack, method: str, path: str, *, form: dict[str, str] | None = None,
               body: Any = None, raw: bytes | None = None,
               headers: list[tuple[str, str]] | None = None) -> tuple[int, dict[str, str], Any]:
    client = RawClient(stack.mcp)
    data, extra = b"", list(headers or [])
    if form is not None:
        data = urlencode(form).encode()
        extra.append(("content-type", "application/x-www-form-urlencoded"))
    elif body is not None or raw is not None:
        data = raw if raw is not None else json.dumps(body).encode()
        extra.append(("content-type", "application/json"))
    try:
        status, raw_headers, answer = await client.http.request(
            method, stack.issuer + path, headers=extra, body=data)
    finally:
        await client.aclose()
    found = {k.decode().lower(): v.decode() for k, v in raw_headers}
    try:
        decoded = json.loads(answer) if answer else None
    except ValueError:
        decoded = answer.decode()
    return status, found, decoded


async def register(stack: Stack, **metadata: Any) -> str:
    status, _, answer = await call(stack, "POST", "/oauth/register", body={
        "redirect_uris": [CLIENT_REDIRECT], "client_name": "raw", **metadata})
    assert status == 201, answer
    return str(answer["client_id"])


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    return verifier, challenge.rstrip(b"=").decode()


def authorize_url(stack: Stack, client_id: str, challenge: str, **extra: str) -> str:
    params = {"response_type": "code", "client_id": client_id, "redirect_uri": CLIENT_REDIRECT,
              "state": "client-state", "code_challenge": challenge,
              "code_challenge_method": "S256", "scope": "mcp:tools",
              "resource": stack.mcp, **extra}
    return f"{stack.issuer}/oauth/authorize?{urlencode(params)}"


async def login(stack: Stack, client_id: str, challenge: str, user: str = "alice",
                **extra: str) -> dict[str, str]:
    """The chained headless login (both upstreams); the query of the redirect to the client."""
    url = authorize_url(stack, client_id, challenge, **extra)
    return await trio.to_thread.run_sync(browse, url, user)


async def tokens(stack: Stack, user: str = "alice") -> tuple[str, dict[str, Any], str]:
    client_id = await register(stack)
    verifier, challenge = pkce()
    redirect = await login(stack, client_id, challenge, user)
    status, _, answer = await call(stack, "POST", "/oauth/token", form={
        "grant_type": "authorization_code", "code": redirect["code"], "client_id": client_id,
        "redirect_uri": CLIENT_REDIRECT, "code_verifier": verifier, "resource": stack.mcp})
    assert status == 200, answer
    return client_id, answer, redirect["code"]


async def mcp_status(stack: Stack, access_token: str) -> int:
    client = RawClient(stack.mcp)
    client.token = access_token
    try:
        return (await client.initialize()).status
    finally:
        await client.aclose()


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


@contextlib.contextmanager
def chained_upstreams(*, access_token_ttl: int = 600, token_exchange: dict[str, Any] | None = None,
                      groups: dict[str, list[str]] | None = None
                      ) -> Iterator[tuple[int, Idp, Idp]]:
    """vmcp's port (chosen first: the upstreams must know its callback) and two oidc-provider
    instances, ``corp`` and ``hub``, for the embedded authorization server's chained login
    (``token_exchange``: corp also offers RFC 8693, see ``running_idp``; ``groups``: the
    ``groups`` claim of corp's accounts)."""
    port = free_port()
    callback = (f"http://127.0.0.1:{port}/oauth/callback",)
    with running_idp(redirect_uris=callback, access_token_ttl=access_token_ttl,
                     token_exchange=token_exchange, groups=groups) as corp, \
            running_idp(redirect_uris=callback, access_token_ttl=access_token_ttl) as hub:
        yield port, corp, hub


# --- clients known by their metadata document ----------------------------------------------

@dataclass
class DocumentServer:
    base: str = ""
    routes: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)

    def publish(self, path: str, document: Any = None, *, status: int = 200,
                headers: dict[str, str] | None = None, raw: bytes | None = None) -> str:
        """Serve ``document`` (its client_id set to its URL unless given) at ``path``."""
        url = self.base + path
        if document is None and raw is None:
            document = {"client_name": "Example Agent", "redirect_uris": [CLIENT_REDIRECT],
                        "token_endpoint_auth_method": "none", "application_type": "native"}
        if raw is None:
            raw = json.dumps({"client_id": url, **document}).encode()
        self.routes[path] = (status, {"content-type": "application/json", **(headers or {})},
                             raw)
        return url


@contextlib.contextmanager
def document_server() -> Iterator[DocumentServer]:
    docs = DocumentServer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            docs.hits[self.path] = docs.hits.get(self.path, 0) + 1
            status, headers, body = docs.routes.get(self.path, (404, {}, b""))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)  # shutdown() waits up to one poll
    thread.start()
    docs.base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield docs
    finally:
        server.shutdown()
        server.server_close()


_HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')
_ACTION = re.compile(r'<form method="post" action="([^"]+)">')


def form_of(page: str) -> tuple[str, dict[str, str]]:
    action = _ACTION.search(page)
    assert action is not None, page
    return (html.unescape(action.group(1)),
            {html.unescape(k): html.unescape(v) for k, v in _HIDDEN.findall(page)})


async def login_as_document_client(stack: Stack, client_id: str, *, decision: str = "allow",
                                    user: str = "dana") -> tuple[dict[str, str], str]:
    """GET the authorization URL, answer the consent page, then log in through the chain: the
    query of the redirect to the client, and the verifier."""
    verifier, challenge = pkce()
    url = authorize_url(stack, client_id, challenge)
    async with httpx2.AsyncClient(timeout=10, follow_redirects=False) as http:
        page = await http.get(url)
        assert page.status_code == 200, page.text
        action, form = form_of(page.text)
        response = await http.post(action, data={**form, "decision": decision})
        for _ in range(40):
            step, next_url, data = _next_step(response, user, CLIENT_REDIRECT)
            if step == "done":
                assert data is not None
                return data, verifier
            response = await (http.get(next_url) if step == "get"
                              else http.post(next_url, data=data))
    raise AssertionError("no redirect to the client")
