"""A backend's webhooks (an MCPWebhookConfig): HTTP calls that see, change or refuse its requests.

One job: put one request routed to a backend through that backend's webhooks and give the
params to send on, or the refusal. Where it runs (after the gateway's own policies, before the
backend's own) is :mod:`vmcp_trio.gateway.admission`'s. The rules kept, as ToolHive's proxy
keeps them (``stacklok/toolhive``, ``pkg/webhook/``):

* Mutating webhooks first, in their order, each seeing the request as the one before left it;
  then the validating webhooks in theirs, each seeing the final request. The first refusal ends
  the request.
* Each call POSTs ``{version: "v0.1.0", uid, timestamp, principal, mcp_request, context}``:
  ``uid`` fresh per call, ``timestamp`` RFC 3339 UTC, ``principal`` the caller's ``sub``,
  ``name``, ``email``, ``groups`` and ``claims`` (never a credential; an anonymous caller is
  ToolHive's anonymous user), ``mcp_request`` the JSON-RPC request as the backend will get it
  (under its own names), ``context`` ``{server_name, source_ip, transport}`` with the backend's
  name and the caller's address (an IPv6 one as its /64).
* With ``hmacSecretRef`` each call is signed: ``X-ToolHive-Timestamp`` (Unix seconds) and
  ``X-ToolHive-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>." + body>``.
* An answer is HTTP 200 with a JSON object of at most 1 MiB: ``allowed`` decides. HTTP 422 is
  always a refusal. Every other failure (unreachable, past its ``timeout``, another status, a
  body too big or not an object) follows ``failurePolicy``: ``fail`` refuses, ``ignore`` goes
  on as if that webhook were not there (logged, counted).
* A refusal is JSON-RPC error 403 ``Request denied by policy`` (a validating webhook's denial or
  failure), ``Request denied by webhook policy`` (a mutating webhook's denial), or -32603
  ``Webhook error`` (a mutating webhook that failed, closed). The webhook's own ``message`` and
  ``reason`` are logged, never sent to the caller: they may tell more than the caller should
  know.
* A mutation is ``patch_type: json_patch`` and ``patch``, RFC 6902 operations on
  ``{"mcp_request": ...}`` whose every ``path`` and ``from`` is under ``/mcp_request/``. It may
  change the params only (the route is decided): a patch that reaches outside, fails to apply,
  changes ``jsonrpc``, ``id`` or ``method``, or leaves params not an object is the webhook's
  failure (``failurePolicy``), and so is one of more than :data:`MAX_PATCH_OPS` operations or
  one that makes the request larger than 1 MiB (checked after each operation that can grow
  it: a ``copy`` may double it, and a few dozen would take the process's memory).
* Bounds: the ``mcp_request`` at most 1 MiB (else -32600, as ToolHive's 413), each answer at
  most 1 MiB, each call within its ``timeout``; the calls of one request one after the other.
  Each webhook keeps at most :data:`IDLE_PER_WEBHOOK` idle connections (closed by
  :meth:`Webhooks.aclose` when a reload replaces them).
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import logging
import os
import ssl
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import trio

from ...http.client import HttpClient, HttpError
from ...protocol.jsonrpc import INTERNAL_ERROR, INVALID_REQUEST, ErrorObject, RequestId
from ...resources.plan import WebhookPlan, WebhooksPlan
from ...runtime.metrics import Metrics
from ..identity import ANONYMOUS, Identity

__all__ = ["API_VERSION", "WebhookRefusal", "Webhooks", "signature"]

log = logging.getLogger("vmcp.webhooks")

API_VERSION = "v0.1.0"
MAX_REQUEST_BYTES = 1 << 20
MAX_RESPONSE_BYTES = 1 << 20
MAX_PATCH_OPS = 100
IDLE_PER_WEBHOOK = 4
DENIED = 403
DENIED_BY_VALIDATING = "Request denied by policy"
DENIED_BY_MUTATING = "Request denied by webhook policy"
ANONYMOUS_PRINCIPAL = {"sub": "anonymous", "name": "Anonymous User",
                       "email": "anonymous@localhost"}
_PATCH_OPS = frozenset({"add", "remove", "replace", "copy", "move", "test"})
_PREFIX = "/mcp_request/"


class WebhookRefusal(Exception):
    """The request may not go on: the JSON-RPC error the caller gets."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.error = ErrorObject(code, message)


class _Failed(Exception):
    """A webhook that did not answer usably (``always_deny``: it answered HTTP 422)."""

    def __init__(self, detail: str, *, always_deny: bool = False) -> None:
        super().__init__(detail)
        self.always_deny = always_deny


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """``X-ToolHive-Signature`` of ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret, f"{timestamp}.".encode("ascii") + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def _ssl_context(plan: WebhookPlan) -> ssl.SSLContext:
    """The TLS settings of one webhook: its CA (besides the system's), its client certificate,
    or no verification."""
    context = ssl.create_default_context()
    if not plan.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif plan.ca_certificates is not None:
        context.load_verify_locations(cadata=plan.ca_certificates.value.decode("ascii"))
    if plan.client_certificate is not None and plan.client_key is not None:
        # ssl loads a certificate chain from files only: a private directory, gone at once.
        with tempfile.TemporaryDirectory(prefix="vmcp-webhook-") as directory:
            cert, key = Path(directory, "tls.crt"), Path(directory, "tls.key")
            for path, secret in ((cert, plan.client_certificate), (key, plan.client_key)):
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "wb") as file:
                    file.write(secret.value)
            context.load_cert_chain(str(cert), str(key))
    return context


@dataclass(frozen=True)
class _Hook:
    plan: WebhookPlan
    label: str
    """``namespace/config/name``: the webhook in logs and metrics."""
    client: HttpClient


class Webhooks:
    """The webhooks of one backend (``server_name``)."""

    def __init__(self, plan: WebhooksPlan, server_name: str, metrics: Metrics) -> None:
        self.server_name = server_name
        self.metrics = metrics

        def hook(webhook: WebhookPlan) -> _Hook:
            client = HttpClient(max_idle_per_origin=IDLE_PER_WEBHOOK,
                                max_idle=IDLE_PER_WEBHOOK, ssl_context=_ssl_context(webhook))
            return _Hook(webhook, f"{plan.source}/{webhook.name}", client)
        self.mutating = tuple(hook(webhook) for webhook in plan.mutating)
        self.validating = tuple(hook(webhook) for webhook in plan.validating)

    async def aclose(self) -> None:
        for hook in (*self.mutating, *self.validating):
            await hook.client.aclose()

    async def review(self, identity: Identity, source_ip: str, request_id: RequestId,
                     method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """The params to send on (changed by the mutating webhooks), or
        :class:`WebhookRefusal`."""
        principal = _principal(identity)
        context = {"server_name": self.server_name, "source_ip": source_ip,
                   "transport": "streamable-http"}
        request: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method,
                                   "params": dict(params)}
        if len(orjson.dumps(request)) > MAX_REQUEST_BYTES:
            raise WebhookRefusal(INVALID_REQUEST, f"the request is larger than the "
                                 f"{MAX_REQUEST_BYTES} bytes its webhooks are sent")
        for hook in self.mutating:
            request = await self._mutated(hook, principal, context, request)
        for hook in self.validating:
            await self._validated(hook, principal, context, request)
        params_out: dict[str, Any] = request["params"]
        return params_out

    async def _mutated(self, hook: _Hook, principal: dict[str, Any] | None,
                       context: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        try:
            answer = await self._call(hook, principal, context, request)
            if answer.get("allowed") is not True:
                raise self._denied(hook, request, DENIED_BY_MUTATING, answer)
            patched = _patched(request, answer)
        except _Failed as failure:
            if failure.always_deny:
                raise self._denied(hook, request, DENIED_BY_MUTATING) from None
            if self._failed_open(hook, request, failure):
                return request
            raise WebhookRefusal(INTERNAL_ERROR, "Webhook error") from None
        self._count(hook, "allowed" if patched is request else "patched")
        return patched

    async def _validated(self, hook: _Hook, principal: dict[str, Any] | None,
                         context: dict[str, Any], request: dict[str, Any]) -> None:
        try:
            answer = await self._call(hook, principal, context, request)
        except _Failed as failure:
            if failure.always_deny:
                raise self._denied(hook, request, DENIED_BY_VALIDATING) from None
            if self._failed_open(hook, request, failure):
                return
            raise WebhookRefusal(DENIED, DENIED_BY_VALIDATING) from None
        if answer.get("allowed") is not True:
            raise self._denied(hook, request, DENIED_BY_VALIDATING, answer)
        self._count(hook, "allowed")

    def _denied(self, hook: _Hook, request: dict[str, Any], message: str,
                answer: dict[str, Any] | None = None) -> WebhookRefusal:
        """A webhook's denial (its answer, or None for HTTP 422): counted, logged with its
        reason, and the refusal the caller gets (``message``, never the webhook's)."""
        self._count(hook, "denied")
        if answer is None:
            log.info("webhook %s denied %s with HTTP 422", hook.label, request["method"])
        else:
            log.info("webhook %s denied %s (reason %r, message %r)", hook.label,
                     request["method"], answer.get("reason"), answer.get("message"))
        return WebhookRefusal(DENIED, message)

    async def _call(self, hook: _Hook, principal: dict[str, Any] | None,
                    context: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        """The webhook's answer (a JSON object) to ``request``; :class:`_Failed` otherwise."""
        uid = str(uuid.uuid4())
        body = orjson.dumps({
            "version": API_VERSION, "uid": uid,
            "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "principal": principal, "mcp_request": request, "context": context})
        headers = [("content-type", "application/json"), ("accept", "application/json")]
        if hook.plan.hmac_secret is not None:
            now = int(time.time())
            headers += [("x-toolhive-timestamp", str(now)),
                        ("x-toolhive-signature", signature(hook.plan.hmac_secret.value, now,
                                                           body))]
        status, data = 0, b""
        with trio.move_on_after(hook.plan.timeout_seconds) as scope:
            try:
                status, _, data = await hook.client.request(
                    "POST", hook.plan.url, headers=headers, body=body, limit=MAX_RESPONSE_BYTES)
            except HttpError as exc:
                raise _Failed(str(exc)) from None
        if scope.cancelled_caught:
            raise _Failed(f"no answer within {hook.plan.timeout_seconds:g}s")
        if status == 422:
            raise _Failed("HTTP 422", always_deny=True)
        if status != 200:
            raise _Failed(f"HTTP {status}")
        try:
            answer = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise _Failed("the answer is not JSON") from None
        if not isinstance(answer, dict):
            raise _Failed("the answer is not a JSON object")
        return answer

    def _failed_open(self, hook: _Hook, request: dict[str, Any], failure: _Failed) -> bool:
        """A webhook that failed, counted and logged: whether the request goes on
        (``failurePolicy: ignore``)."""
        outcome = "failed_open" if hook.plan.fail_open else "failed_closed"
        self._count(hook, outcome)
        log.warning("webhook %s failed on %s: %s (failurePolicy %s: %s)", hook.label,
                    request["method"], failure, "ignore" if hook.plan.fail_open else "fail",
                    "the request goes on" if hook.plan.fail_open else "the request is refused")
        return hook.plan.fail_open

    def _count(self, hook: _Hook, outcome: str) -> None:
        self.metrics.webhook_calls.labels(hook.label, outcome).inc()


def _principal(identity: Identity) -> dict[str, Any] | None:
    """What a webhook learns of the caller: never a credential."""
    if identity is ANONYMOUS:
        return dict(ANONYMOUS_PRINCIPAL)
    claims = identity.claims
    principal: dict[str, Any] = {"sub": identity.subject}
    for name in ("name", "email"):
        if isinstance(claims.get(name), str):
            principal[name] = claims[name]
    groups = claims.get("groups")
    if isinstance(groups, list) and all(isinstance(group, str) for group in groups):
        principal["groups"] = groups
    principal["claims"] = claims
    return principal


def _patched(request: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """``request`` as a mutating webhook's answer changes it (the same object when it does
    not); :class:`_Failed` for a patch it may not apply."""
    patch_type, patch = answer.get("patch_type"), answer.get("patch")
    if not patch_type or not patch:
        return request
    if patch_type != "json_patch":
        raise _Failed(f"patch_type {str(patch_type)[:40]!r} is not json_patch")
    if not isinstance(patch, list) or not all(isinstance(op, dict) for op in patch):
        raise _Failed("the patch is not a list of operations")
    if len(patch) > MAX_PATCH_OPS:
        raise _Failed(f"the patch has {len(patch)} operations (at most {MAX_PATCH_OPS})")
    for index, op in enumerate(patch):
        if op.get("op") not in _PATCH_OPS:
            raise _Failed(f"patch[{index}]: unsupported operation {str(op.get('op'))[:40]!r}")
        paths = [op.get("path"), *([op.get("from")] if op["op"] in ("copy", "move") else [])]
        if not all(isinstance(path, str) and path.startswith(_PREFIX) for path in paths):
            raise _Failed(f"patch[{index}]: reaches outside /mcp_request")
    document = copy.deepcopy({"mcp_request": request})
    for index, op in enumerate(patch):  # one at a time: a copy may double the request
        try:
            jsonpatch.JsonPatch([op]).apply(document, in_place=True)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError,
                KeyError) as exc:
            raise _Failed(f"the patch does not apply: {str(exc)[:200]}") from None
        if op["op"] in ("add", "replace", "copy") \
                and len(orjson.dumps(document)) > MAX_REQUEST_BYTES:
            raise _Failed(f"patch[{index}]: the request grows past {MAX_REQUEST_BYTES} bytes")
    patched = document["mcp_request"]
    if not isinstance(patched, dict) or any(
            patched.get(name) != request[name] for name in ("jsonrpc", "id", "method")):
        raise _Failed("the patch changes the request's jsonrpc, id or method")
    if not isinstance(patched.get("params"), dict):
        raise _Failed("the patch leaves params not an object")
    return patched
