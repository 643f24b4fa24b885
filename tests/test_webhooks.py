"""An MCPServer's webhooks (``webhookConfigRef`` to an MCPWebhookConfig): their rules, and a real
``vmcp serve`` whose calls to that server go through them (signed, mutated, refused, failing
open or closed, over mutual TLS), while the other backends' calls do not.

The webhook servers are stand-ins (:class:`WebhookServer`, the standard library's HTTP server
with a behaviour the test sets): no installable program is a ToolHive webhook.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import trio

from vmcp_trio.auth.policy.webhooks import signature
from vmcp_trio.resources.plan import SecretValue, WebhookPlan, WebhooksPlan
from vmcp_trio.resources.summary import describe_plan

from .gateway_helpers import RawClient, quickstart_docs, running_gateway
from .helpers import expect_error, private_ca, resource, validate

API = "toolhive.stacklok.dev/v1beta1"
HMAC_KEY = "webhook-signing-key-of-32-bytes!"

Answer = tuple[int, Any]
"""A stand-in's answer: HTTP status and a JSON body (bytes sent as they are)."""


@dataclass
class WebhookServer:
    """A webhook stand-in on 127.0.0.1: ``answer`` decides each reply from the payload it got;
    ``seen`` keeps (headers, raw body, payload) of every request, and the client certificate's
    subject when it asked for one."""

    answer: Callable[[dict[str, Any]], Answer] = lambda payload: (200, {"allowed": True})
    seen: list[tuple[dict[str, str], bytes, dict[str, Any]]] = field(default_factory=list)
    peers: list[Any] = field(default_factory=list)
    url: str = ""


@contextmanager
def webhook_server(tls: ssl.SSLContext | None = None) -> Iterator[WebhookServer]:
    state = WebhookServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            payload = json.loads(body)
            state.seen.append(({k.lower(): v for k, v in self.headers.items()}, body, payload))
            if tls is not None:
                state.peers.append(self.connection.getpeercert())
            status, answer = state.answer(payload)
            data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            """Quiet about a client that left before the answer (a timeout it keeps)."""
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    scheme = "https" if tls is not None else "http"
    state.url = f"{scheme}://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def hook(name: str, url: str, **fields: Any) -> dict[str, Any]:
    """One webhook over plain http (``insecureSkipVerify``: an in-cluster endpoint)."""
    return {"name": name, "url": url, "tlsConfig": {"insecureSkipVerify": True}, **fields}


def with_webhooks(validating: Sequence[dict[str, Any]] = (),
                  mutating: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The quickstart whose server ``clock`` names the MCPWebhookConfig ``hooks``, with the
    Secret ``hook-keys`` holding the signing key."""
    docs = quickstart_docs()
    resource(docs, "MCPServer", "clock")["spec"]["webhookConfigRef"] = {"name": "hooks"}
    spec: dict[str, Any] = {}
    if validating:
        spec["validating"] = list(validating)
    if mutating:
        spec["mutating"] = list(mutating)
    docs += [{"apiVersion": API, "kind": "MCPWebhookConfig", "metadata": {"name": "hooks"},
              "spec": spec},
             {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hook-keys"},
              "stringData": {"hmac": HMAC_KEY}}]
    return docs


async def call(client: RawClient, name: str, message: str) -> dict[str, Any]:
    reply = await client.request("tools/call", {"name": name, "arguments": {"message": message}})
    assert reply.status == 200, reply
    return reply.messages[-1]


def echoed(reply: dict[str, Any]) -> str:
    assert "result" in reply, reply
    return str(reply["result"]["content"][0]["text"])


# --- rules ---------------------------------------------------------------------------------------


def test_the_webhooks_go_with_their_server() -> None:
    docs = with_webhooks(
        validating=[hook("policy", "http://policy.hooks.svc/validate", timeout="5s",
                         failurePolicy="ignore",
                         hmacSecretRef={"name": "hook-keys", "key": "hmac"})],
        mutating=[{"name": "enrich", "url": "https://enrich.example.com/mutate"}])
    result = validate(docs)
    assert result.ok, result.problems
    backends = {backend.name: backend.webhooks for backend in result.plans[0].backends}
    assert backends["notes"] is None
    source = backends["clock"].source if backends["clock"] else ""
    assert backends["clock"] == WebhooksPlan(
        source,
        mutating=(WebhookPlan("enrich", "https://enrich.example.com/mutate"),),
        validating=(WebhookPlan("policy", "http://policy.hooks.svc/validate", 5.0,
                                fail_open=True, verify=False, hmac_secret=SecretValue(
                                    f"{source.split('/')[0]}/hook-keys[hmac]",
                                    HMAC_KEY.encode())),))
    assert source.endswith("/hooks")
    assert "1 mutating, 1 validating" in describe_plan(result.plans[0])


def test_at_its_in_cluster_url_its_proxy_calls_them() -> None:
    """A server at its in-cluster URL is behind ToolHive's proxy, which calls its webhooks:
    vmcp leaves them to it (no plan, no error)."""
    docs = with_webhooks(validating=[{"name": "v", "url": "https://v.example"}])
    clock = resource(docs, "MCPServer", "clock")
    for name in ("command", "args"):
        clock["spec"].pop(name)
    result = validate(docs)
    assert result.ok, result.problems
    assert all(backend.webhooks is None for backend in result.plans[0].backends)


MISTAKES = [
    # (what, webhook fields, the path reported under spec.validating[0], rule, message)
    ("http without insecureSkipVerify", {"tlsConfig": None}, "url", "https",
     "must be https (tlsConfig.insecureSkipVerify allows http"),
    ("a timeout past 30s", {"timeout": "45s"}, "timeout", "range", "must be between 1s and 30s"),
    ("a timeout under 1s", {"timeout": "500ms"}, "timeout", "range", "must be between"),
    ("a certificate without its key", {"tlsConfig": {
        "clientCertSecretRef": {"name": "hook-keys", "key": "hmac"}}}, "tlsConfig", "together",
     "clientCertSecretRef and clientKeySecretRef come together"),
    ("a CA that is not PEM", {"tlsConfig": {"caSecretRef": {"name": "hook-keys",
                                                            "key": "hmac"}}},
     "tlsConfig.caSecretRef.key", "ca-certificate", "is not PEM certificates"),
    ("a signing key nowhere", {"hmacSecretRef": {"name": "elsewhere", "key": "k"}},
     "hmacSecretRef.name", "reference", "refers to Secret"),
    ("a failure policy ToolHive does not have", {"failurePolicy": "retry"}, "failurePolicy",
     "enum", "must be one of 'fail' or 'ignore'"),
]


@pytest.mark.parametrize(("fields", "path", "rule", "message"),
                         [case[1:] for case in MISTAKES], ids=[case[0] for case in MISTAKES])
def test_a_webhooks_mistakes_are_reported_at_its_field(fields: dict[str, Any], path: str,
                                                        rule: str, message: str) -> None:
    webhook = {**hook("v", "http://v.hooks.svc/validate"), **fields}
    if webhook.get("tlsConfig") is None:
        webhook.pop("tlsConfig")
    expect_error(validate(with_webhooks(validating=[webhook])), rule,
                 f"spec.validating[0].{path}", kind="MCPWebhookConfig", name="hooks",
                 contains=message)


def test_a_config_needs_a_webhook_with_a_name_of_its_own() -> None:
    expect_error(validate(with_webhooks()), "required", "spec", kind="MCPWebhookConfig",
                 contains="needs at least one webhook")
    twice = [hook("same", "http://a.svc"), hook("same", "http://b.svc")]
    expect_error(validate(with_webhooks(validating=twice[:1], mutating=twice[1:])), "duplicate",
                 "spec.validating[0].name", kind="MCPWebhookConfig",
                 contains="'same' is also the name of the webhook at mutating.0")
    docs = with_webhooks(validating=twice[:1])
    resource(docs, "MCPServer", "clock")["spec"]["webhookConfigRef"] = {"name": "missing"}
    expect_error(validate(docs), "reference", "spec.webhookConfigRef.name", kind="MCPServer",
                 contains="refers to MCPWebhookConfig")


def test_a_client_key_must_be_its_certificates(tmp_path: Path) -> None:
    _, cert, _ = private_ca(tmp_path, "one")
    _, _, other_key = private_ca(tmp_path, "two")
    docs = with_webhooks(validating=[{"name": "v", "url": "https://v.example", "tlsConfig": {
        "clientCertSecretRef": {"name": "client", "key": "tls.crt"},
        "clientKeySecretRef": {"name": "client", "key": "tls.key"}}}])
    docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "client"},
                 "stringData": {"tls.crt": cert.read_text(), "tls.key": other_key.read_text()}})
    expect_error(validate(docs), "key-pair", "spec.validating[0].tlsConfig.clientKeySecretRef",
                 kind="MCPWebhookConfig", contains="is not the key of the certificate")


# --- a real vmcp serve ---------------------------------------------------------------------------


async def test_a_validating_webhook_sees_each_call_signed_and_decides() -> None:
    """Each call to clock reaches the webhook signed, with the caller, the request under
    clock's own names and its context; a denial (allowed false, or HTTP 422) is 403 "Request
    denied by policy" without the webhook's message; a request past what webhooks are sent
    is refused unsent; notes' calls meet no webhook."""
    with webhook_server() as server:
        docs = with_webhooks(validating=[hook(
            "policy", server.url, hmacSecretRef={"name": "hook-keys", "key": "hmac"})])
        async with running_gateway(docs) as (url, _):
            client = RawClient(url)
            try:
                assert (await client.initialize()).status == 200
                assert echoed(await call(client, "clock_echo", "hello")) == "hello"
                (headers, body, payload), = server.seen
                assert payload["version"] == "v0.1.0" and len(payload["uid"]) == 36
                assert payload["principal"]["sub"] == "anonymous"
                assert payload["mcp_request"]["method"] == "tools/call"
                assert payload["mcp_request"]["params"]["name"] == "echo"  # clock's own name
                assert payload["mcp_request"]["params"]["arguments"] == {"message": "hello"}
                assert payload["context"]["server_name"] == "clock"
                assert payload["context"]["source_ip"] == "127.0.0.1"
                stamp = int(headers["x-toolhive-timestamp"])
                assert abs(stamp - time.time()) < 30
                assert hmac.compare_digest(headers["x-toolhive-signature"],
                                           signature(HMAC_KEY.encode(), stamp, body))
                assert headers["x-toolhive-signature"] == "sha256=" + hmac.new(
                    HMAC_KEY.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()

                server.answer = lambda payload: (200, {
                    "version": "v0.1.0", "uid": payload["uid"], "allowed": False,
                    "message": "secret-internal-reason", "reason": "Forbidden"})
                denied = await call(client, "clock_echo", "again")
                assert denied["error"] == {"code": 403, "message": "Request denied by policy"}
                server.answer = lambda payload: (422, {"allowed": True})
                denied = await call(client, "clock_echo", "again")
                assert denied["error"]["message"] == "Request denied by policy"
                seen = len(server.seen)
                big = await call(client, "clock_echo", "x" * (1 << 20))  # past the 1 MiB
                assert big["error"]["code"] == -32600, big["error"]
                assert "larger than the 1048576 bytes its webhooks are sent" in \
                    big["error"]["message"]
                listed = await client.request("tools/call", {"name": "notes_list_notes",
                                                             "arguments": {}})
                assert "result" in listed.messages[-1], listed.messages
                assert len(server.seen) == seen  # notes has no webhook
            finally:
                await client.aclose()


async def test_a_broken_webhook_follows_its_failure_policy() -> None:
    """A webhook that fails (HTTP 500, no answer within its timeout, unreachable, not JSON)
    lets the call go on under ``ignore`` and refuses it under ``fail``."""
    with webhook_server() as lenient, webhook_server() as strict:
        docs = with_webhooks(validating=[
            hook("lenient", lenient.url, failurePolicy="ignore", timeout="1s"),
            hook("strict", strict.url)])
        async with running_gateway(docs) as (url, _):
            client = RawClient(url)
            try:
                assert (await client.initialize()).status == 200
                lenient.answer = lambda payload: (500, {"error": "down"})
                assert echoed(await call(client, "clock_echo", "through")) == "through"

                def slow(payload: dict[str, Any]) -> Answer:
                    time.sleep(3)
                    return 200, {"allowed": False}
                lenient.answer = slow
                started = time.monotonic()
                assert echoed(await call(client, "clock_echo", "late")) == "late"
                assert time.monotonic() - started < 2.5  # its 1s timeout, not its 3s
                lenient.answer = lambda payload: (200, b"not json")
                assert echoed(await call(client, "clock_echo", "garbled")) == "garbled"
                assert len(strict.seen) == 3
                strict.answer = lambda payload: (500, {"error": "down"})
                refused = await call(client, "clock_echo", "closed")
                assert refused["error"] == {"code": 403, "message": "Request denied by policy"}
            finally:
                await client.aclose()
    docs = with_webhooks(validating=[hook("gone", "http://127.0.0.1:9/hook")])
    async with running_gateway(docs) as (url, _):
        client = RawClient(url)
        try:
            assert (await client.initialize()).status == 200
            refused = await call(client, "clock_echo", "nobody there")
            assert refused["error"]["message"] == "Request denied by policy"
        finally:
            await client.aclose()


def rewrite(message: str) -> Callable[[dict[str, Any]], Answer]:
    return lambda payload: (200, {"allowed": True, "patch_type": "json_patch", "patch": [
        {"op": "replace", "path": "/mcp_request/params/arguments/message", "value": message}]})


async def test_a_mutating_webhook_changes_what_the_server_gets() -> None:
    """The mutating webhook's JSON Patch is applied before the validating webhook sees the
    request and before clock gets it; a patch outside ``mcp_request`` or one that changes the
    method is the webhook's failure (refused under ``fail``: -32603 "Webhook error"), and so are
    a patch bomb (copies doubling the request) and a patch of too many operations; a mutating
    denial is 403 "Request denied by webhook policy"."""
    with webhook_server() as mutating, webhook_server() as validating:
        docs = with_webhooks(mutating=[hook("enrich", mutating.url)],
                             validating=[hook("policy", validating.url)])
        async with running_gateway(docs) as (url, _):
            client = RawClient(url)
            try:
                assert (await client.initialize()).status == 200
                mutating.answer = rewrite("changed by the webhook")
                assert echoed(await call(client, "clock_echo", "original")) == \
                    "changed by the webhook"
                assert mutating.seen[-1][2]["mcp_request"]["params"]["arguments"] == {
                    "message": "original"}
                assert validating.seen[-1][2]["mcp_request"]["params"]["arguments"] == {
                    "message": "changed by the webhook"}
                for patch in ([{"op": "replace", "path": "/principal", "value": {}}],
                              [{"op": "replace", "path": "/mcp_request/method",
                                "value": "tools/list"}],
                              [{"op": "remove", "path": "/mcp_request/params/nothing"}]):
                    mutating.answer = lambda payload, patch=patch: (200, {  # type: ignore[misc]
                        "allowed": True, "patch_type": "json_patch", "patch": patch})
                    refused = await call(client, "clock_echo", "x")
                    assert refused["error"] == {"code": -32603, "message": "Webhook error"}, \
                        patch
                # A patch bomb: each copy doubles the arguments; 40 would need a terabyte.
                bomb = [{"op": "copy", "from": "/mcp_request/params/arguments",
                         "path": f"/mcp_request/params/arguments/x{i}"} for i in range(40)]
                mutating.answer = lambda payload: (200, {
                    "allowed": True, "patch_type": "json_patch", "patch": bomb})
                with trio.fail_after(10):
                    refused = await call(client, "clock_echo", "x" * 1000)
                assert refused["error"] == {"code": -32603, "message": "Webhook error"}
                many = [{"op": "test", "path": "/mcp_request/method",
                         "value": "tools/call"}] * 101
                mutating.answer = lambda payload: (200, {
                    "allowed": True, "patch_type": "json_patch", "patch": many})
                refused = await call(client, "clock_echo", "x")
                assert refused["error"]["message"] == "Webhook error"
                mutating.answer = lambda payload: (200, {"allowed": False, "message": "no"})
                refused = await call(client, "clock_echo", "x")
                assert refused["error"] == {"code": 403,
                                            "message": "Request denied by webhook policy"}
            finally:
                await client.aclose()


async def test_a_webhook_over_mutual_tls(tmp_path: Path) -> None:
    """``tlsConfig``: the webhook's certificate is verified against ``caSecretRef`` and vmcp
    shows the client certificate of ``clientCertSecretRef``/``clientKeySecretRef``, which the
    webhook requires."""
    (tmp_path / "server").mkdir()
    (tmp_path / "client").mkdir()
    server_ca, server_cert, server_key = private_ca(tmp_path / "server", "webhook")
    client_ca, client_cert, client_key = private_ca(tmp_path / "client", "vmcp")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(server_cert, server_key)
    tls.load_verify_locations(client_ca)
    tls.verify_mode = ssl.CERT_REQUIRED
    with webhook_server(tls) as server:
        docs = with_webhooks(validating=[{"name": "mtls", "url": server.url, "tlsConfig": {
            "caSecretRef": {"name": "webhook-tls", "key": "ca.crt"},
            "clientCertSecretRef": {"name": "webhook-tls", "key": "tls.crt"},
            "clientKeySecretRef": {"name": "webhook-tls", "key": "tls.key"}}}])
        docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "webhook-tls"},
                     "data": {name: base64.b64encode(path.read_bytes()).decode() for name, path
                              in (("ca.crt", server_ca), ("tls.crt", client_cert),
                                  ("tls.key", client_key))}})
        async with running_gateway(docs) as (url, _):
            client = RawClient(url)
            try:
                assert (await client.initialize()).status == 200
                assert echoed(await call(client, "clock_echo", "over tls")) == "over tls"
            finally:
                await client.aclose()
        assert [dict(part) for part in server.peers[0]["subject"]] == [{"commonName": "vmcp"}]


async def test_the_webhooks_metrics_count_each_outcome() -> None:
    with webhook_server() as server:
        docs = with_webhooks(validating=[hook("policy", server.url)])
        async with running_gateway(docs) as (url, _):
            client = RawClient(url)
            try:
                assert (await client.initialize()).status == 200
                await call(client, "clock_echo", "a")
                server.answer = lambda payload: (200, {"allowed": False})
                await call(client, "clock_echo", "b")
                _, _, body = await client.http.request("GET", url.rsplit("/", 1)[0] + "/metrics")
                metrics = body.decode()
            finally:
                await client.aclose()
    lines = [line for line in metrics.splitlines() if line.startswith("vmcp_webhook_calls_total")]
    assert any('outcome="allowed"' in line and line.endswith(" 1.0") for line in lines), lines
    assert any('outcome="denied"' in line and line.endswith(" 1.0") for line in lines), lines
    assert all("/hooks/policy" in line for line in lines), lines
