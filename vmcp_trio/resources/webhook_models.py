"""Shapes of an MCPWebhookConfig, in ToolHive's names.

One job: the models of an MCPWebhookConfig's ``validating`` and ``mutating`` webhooks (ToolHive's
``MCPWebhookConfigSpec``), which an MCPServer names in ``webhookConfigRef``. Shape only, as in
:mod:`.models`: what the fields mean together (HTTPS, the timeout's range, a client certificate
with its key) is :mod:`.webhook_rules`'.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, Strict

from .base_model import Model, SecretKeyRef
from .fields import Bool, DurationText, UrlText

__all__ = ["MAX_WEBHOOKS", "Webhook", "WebhookConfigSpec", "WebhookTls"]

MAX_WEBHOOKS = 32
"""Webhooks of one kind in one MCPWebhookConfig: each is one HTTP round trip per request."""


class WebhookTls(Model):
    """``tlsConfig``: the CA that verifies the webhook's certificate (the system's without
    it), a client certificate and key for mutual TLS, or no verification at all (which also
    allows plain ``http``)."""

    ca_secret_ref: SecretKeyRef | None = None
    client_cert_secret_ref: SecretKeyRef | None = None
    client_key_secret_ref: SecretKeyRef | None = None
    insecure_skip_verify: Bool = False


class Webhook(Model):
    """One webhook: where it is, how long to wait for it, and what its failure means."""

    name: Annotated[str, Strict(), Field(min_length=1, max_length=63)]
    url: UrlText
    timeout: DurationText | None = None
    """Default 10s, between 1s and 30s."""
    failure_policy: Literal["fail", "ignore"] = "fail"
    tls_config: WebhookTls | None = None
    hmac_secret_ref: SecretKeyRef | None = None
    """The key that signs each payload (``X-ToolHive-Signature``)."""


class WebhookConfigSpec(Model):
    """MCPWebhookConfig: the webhooks every request to the servers that name it goes through,
    the mutating ones first."""

    validating: Annotated[tuple[Webhook, ...], Field(max_length=MAX_WEBHOOKS)] = ()
    mutating: Annotated[tuple[Webhook, ...], Field(max_length=MAX_WEBHOOKS)] = ()
