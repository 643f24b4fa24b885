"""The rules of an MCPWebhookConfig: from its webhooks to a :class:`~.plan.WebhooksPlan`.

One job: check each webhook of an MCPWebhookConfig, each problem at its field, and resolve its
secrets, as ToolHive's ``Config.Validate`` does (``pkg/webhook/types.go``). Rules kept:

* at least one webhook, validating or mutating; names unique within the resource (they name
  the webhook in logs and metrics);
* ``url`` is ``https``, unless ``tlsConfig.insecureSkipVerify`` (ToolHive's switch for an
  in-cluster ``http`` endpoint, which also turns certificate checks off). The URL is the
  operator's, not a peer's: a webhook inside the cluster is the usual case, so private
  addresses are allowed (no SSRF guard);
* ``timeout`` between 1s and 30s (default 10s);
* ``tlsConfig``: ``caSecretRef`` holds PEM certificates; ``clientCertSecretRef`` and
  ``clientKeySecretRef`` come together (mutual TLS), a PEM certificate and the PEM private key
  that goes with it; ``insecureSkipVerify`` makes ``caSecretRef`` unused (a warning);
* ``hmacSecretRef``: a Secret key whose value is not empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from . import models as m
from .durations import Duration
from .plan import SecretValue, WebhookPlan, WebhooksPlan
from .problems import PathPart
from .report import Report, Resource
from .webhook_models import Webhook

__all__ = ["TIMEOUT_RANGE", "webhooks_plan"]

TIMEOUT_RANGE = (Duration.of(seconds=1), Duration.of(seconds=30))
DEFAULT_TIMEOUT = Duration.of(seconds=10)


class Resolver(Protocol):
    """What these rules use of :class:`~.resolver.Resolver` (which calls them)."""

    report: Report

    def secret(self, owner: Resource, path: Sequence[PathPart],
               ref: m.SecretKeyRef) -> SecretValue | None: ...

    def ca_certificates(self, owner: Resource, path: Sequence[PathPart],
                        ref: m.SecretKeyRef) -> SecretValue | None: ...


def webhooks_plan(resolver: Resolver, resource: Resource) -> WebhooksPlan | None:
    """The plan of the MCPWebhookConfig ``resource``; None when it is wrong (reported)."""
    spec = resource.spec
    report = resolver.report
    errors_before = report.error_count
    if not spec.validating and not spec.mutating:
        report.error(resource, ("spec",), "required",
                     "needs at least one webhook in validating or mutating")
    seen: dict[str, tuple[PathPart, ...]] = {}
    plans: dict[str, list[WebhookPlan]] = {"mutating": [], "validating": []}
    for kind, webhooks in (("mutating", spec.mutating), ("validating", spec.validating)):
        for index, webhook in enumerate(webhooks):
            path: tuple[PathPart, ...] = ("spec", kind, index)
            if webhook.name in seen:
                report.error(resource, (*path, "name"), "duplicate",
                             f"{webhook.name!r} is also the name of the webhook at "
                             f"{'.'.join(map(str, seen[webhook.name][1:]))}")
            seen.setdefault(webhook.name, path)
            plan = _webhook(resolver, resource, path, webhook)
            if plan is not None:
                plans[kind].append(plan)
    if report.error_count != errors_before:
        return None
    return WebhooksPlan(f"{resource.namespace}/{resource.name}", tuple(plans["mutating"]),
                        tuple(plans["validating"]))


def _webhook(resolver: Resolver, owner: Resource, path: tuple[PathPart, ...],
             webhook: Webhook) -> WebhookPlan | None:
    report = resolver.report
    errors_before = report.error_count
    tls = webhook.tls_config
    insecure = tls is not None and tls.insecure_skip_verify
    if urlsplit(webhook.url).scheme != "https" and not insecure:
        report.error(owner, (*path, "url"), "https",
                     "must be https (tlsConfig.insecureSkipVerify allows http, for an endpoint "
                     "inside the cluster)")
    timeout = webhook.timeout or DEFAULT_TIMEOUT
    low, high = TIMEOUT_RANGE
    if not low <= timeout <= high:
        report.error(owner, (*path, "timeout"), "range", f"must be between {low} and {high}")
    secrets: dict[str, SecretValue | None] = {}
    if tls is not None:
        where = (*path, "tlsConfig")
        refs = {"clientCertSecretRef": tls.client_cert_secret_ref,
                "clientKeySecretRef": tls.client_key_secret_ref}
        secrets = {name: resolver.secret(owner, (*where, name), ref)
                   for name, ref in refs.items() if ref is not None}
        if tls.ca_secret_ref is not None:
            secrets["caSecretRef"] = resolver.ca_certificates(
                owner, (*where, "caSecretRef"), tls.ca_secret_ref)
        if (tls.client_cert_secret_ref is None) != (tls.client_key_secret_ref is None):
            report.error(owner, where, "together", "clientCertSecretRef and clientKeySecretRef "
                         "come together (mutual TLS needs both)")
        if insecure and tls.ca_secret_ref is not None:
            report.warn(owner, (*where, "caSecretRef"), "unused-field",
                        "is ignored: insecureSkipVerify turns verification off")
        _check_client_pair(report, owner, where, secrets)
    hmac_secret = None
    if webhook.hmac_secret_ref is not None:
        hmac_secret = resolver.secret(owner, (*path, "hmacSecretRef"), webhook.hmac_secret_ref)
        if hmac_secret is not None and not hmac_secret.value:
            report.error(owner, (*path, "hmacSecretRef", "key"), "empty",
                         f"Secret {hmac_secret.source} is empty: it cannot sign anything")
    if report.error_count != errors_before:
        return None
    return WebhookPlan(
        name=webhook.name, url=webhook.url, timeout_seconds=timeout.total_seconds(),
        fail_open=webhook.failure_policy == "ignore",
        ca_certificates=None if insecure else secrets.get("caSecretRef"),
        client_certificate=secrets.get("clientCertSecretRef"),
        client_key=secrets.get("clientKeySecretRef"), verify=not insecure,
        hmac_secret=hmac_secret)


def _check_client_pair(report: Report, owner: Resource, where: tuple[PathPart, ...],
               secrets: dict[str, SecretValue | None]) -> None:
    """The client certificate is a PEM certificate, and the key is its key."""
    cert, key = secrets.get("clientCertSecretRef"), secrets.get("clientKeySecretRef")
    certificate = None
    if cert is not None:
        try:
            certificate = x509.load_pem_x509_certificate(cert.value)
        except ValueError:
            report.error(owner, (*where, "clientCertSecretRef", "key"), "certificate",
                         f"Secret {cert.source}: is not a PEM certificate")
    if key is not None:
        try:
            private = serialization.load_pem_private_key(key.value, password=None)
        except (ValueError, TypeError):
            report.error(owner, (*where, "clientKeySecretRef", "key"), "private-key",
                         f"Secret {key.source}: is not an unencrypted PEM private key")
            return
        if cert is not None and certificate is not None \
                and certificate.public_key() != private.public_key():
            report.error(owner, (*where, "clientKeySecretRef"), "key-pair",
                         f"Secret {key.source}: is not the key of the certificate in "
                         f"{cert.source}")
