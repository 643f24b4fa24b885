"""Shapes of the embedded authorization server's trust settings, in ToolHive's names.

One job: the models of ``authServerConfig.trustedIssuers`` (external issuers whose JWTs the
server accepts: RFC 7523 assertions through ``jwtBearerGrant``, RFC 8693 subject tokens through
the delegation fields) and ``authServerConfig.delegateClients`` (the confidential clients
declared by the operator that may use RFC 8693 token exchange). Shape only, as in
:mod:`.models`: the rules between fields and with the rest of the server's configuration are
:mod:`.trust_rules`'.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, Strict

from .base_model import Model, SecretKeyRef
from .fields import Bool, DurationText, UrlText

__all__ = ["DelegateClient", "JwtBearerGrant", "SubjectBinding", "TrustedIssuer"]

Text256 = Annotated[str, Strict(), Field(min_length=1, max_length=256)]
Text2048 = Annotated[str, Strict(), Field(min_length=1, max_length=2048)]


class SubjectBinding(Model):
    """An assertion subject (exact, no wildcard) and the RFC 8707 resources it may ask for."""

    subject: Annotated[str, Strict(), Field(min_length=1, max_length=256, pattern=r"^[^*]+$")]
    allowed_resources: Annotated[tuple[UrlText, ...], Field(min_length=1, max_length=50)]


class JwtBearerGrant(Model):
    """``trustedIssuers[].jwtBearerGrant``: the RFC 7523 grant for this issuer's assertions."""

    max_assertion_age: DurationText
    """The longest ``exp - iat`` an assertion may have."""
    subject_bindings: Annotated[tuple[SubjectBinding, ...], Field(min_length=1, max_length=50)]
    accepted_audiences: Annotated[tuple[UrlText, ...], Field(max_length=50)] = ()
    """The names of this server an assertion's ``aud`` may use (default: its token endpoint
    and its issuer)."""


class TrustedIssuer(Model):
    """``authServerConfig.trustedIssuers[]``."""

    issuer_url: Text2048
    jwks_url: UrlText | None = None
    """Default: the ``jwks_uri`` of the issuer's discovery document."""
    insecure_allow_http: Bool = Field(False, alias="insecureAllowHTTP")
    allow_private_ips: Bool = Field(False, alias="allowPrivateIPs")
    expected_audience: Text2048 | None = None
    actor_claim: Annotated[str, Strict(), Field(min_length=1, max_length=64)] | None = None
    allowed_actors: Annotated[tuple[Text256, ...], Field(max_length=50)] = ()
    actor_matcher: Annotated[str, Strict(), Field(min_length=1, max_length=4096)] | None = None
    """A CEL expression over the subject token's claims (``claims``) that admits actors
    besides ``allowedActors``."""
    allow_may_act: Bool = False
    allowed_delegate_clients: Annotated[tuple[Text256, ...],
                                        Field(min_length=1, max_length=50)] | None = None
    jwt_bearer_grant: JwtBearerGrant | None = None


class DelegateClient(Model):
    """``authServerConfig.delegateClients[]``: a confidential client for token exchange."""

    client_id: Text256
    client_secret_ref: SecretKeyRef
    scopes: Annotated[tuple[Text256, ...], Field(min_length=1, max_length=10)]
    audiences: Annotated[tuple[Text2048, ...], Field(min_length=1, max_length=10)]
