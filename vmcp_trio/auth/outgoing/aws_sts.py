"""``awsSts``: the caller's token traded at AWS STS for a role's temporary credentials, with
which every request to the backend is signed (SigV4), as ToolHive's ``aws_sts`` strategy does.

One job: :class:`AwsSts` is the strategy of one MCPExternalAuthConfig of type ``awsSts``. For a
request it:

1. picks the role: the first ``roleMappings`` rule (by priority, then as written) whose
   ``claim`` the caller's ``roleClaim`` claim holds (a list that contains it, or an object with
   it as a key, as CEL's ``in`` has it), or whose ``matcher`` is true of the caller's claims
   (:mod:`~vmcp_trio.auth.claims_matcher`), else ``fallbackRoleArn``; none is the caller's
   error;
2. names the session after the caller's ``sessionNameClaim`` claim (2 to 64 of letters, digits
   and ``_+=,.@-``, as STS requires);
3. calls ``AssumeRoleWithWebIdentity`` (unsigned: the web identity token is the credential) with
   the caller's token, or ``subjectProviderName``'s stored access token, for
   ``sessionDuration`` seconds; the answer's credentials are cached (:class:`~.cache.GrantCache`,
   keyed by a digest of token, role, session name and duration) until shortly before they
   expire, bounded, one call for concurrent requests of a user;
4. signs the request (:func:`~.sigv4.sign`) for ``service`` in ``region``.

An STS refusal (its HTTP status and AWS error code, bounded, never the token), an answer that
cannot be read, or an STS that does not answer within ``timeout`` is a :class:`CredentialError`:
the gateway makes it that backend's error for that call. Health checks carry no caller and are
sent unsigned (ToolHive skips them too).
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode
from xml.etree import ElementTree

import trio

from ...http.client import HttpClient, HttpError
from ...resources.plan import AwsStsAuth
from ..caller import Caller
from ..claims_matcher import compile_matcher
from .cache import GrantCache, GrantError, grant_key
from .sigv4 import AwsCredentials, OutgoingRequest, sign
from .subject import CredentialError, UpstreamTokens, subject_token

__all__ = ["AwsSts"]

MAX_ANSWER_BYTES = 64 * 1024
_SESSION_NAME = re.compile(r"[A-Za-z0-9_+=,.@-]{2,64}")


def _text(root: ElementTree.Element, name: str) -> str | None:
    """The text of the first element named ``name`` (any namespace), stripped."""
    for element in root.iter():
        if element.tag.rpartition("}")[2] == name and element.text and element.text.strip():
            return element.text.strip()
    return None


def _clean(text: str, token: str) -> str:
    text = text.replace(token, "[redacted]")
    return "".join(ch if ch.isprintable() else " " for ch in text[:200])


class AwsSts:
    def __init__(self, plan: AwsStsAuth, client: HttpClient, tokens: UpstreamTokens | None, *,
                 timeout: float = 10.0, cache: GrantCache[AwsCredentials] | None = None) -> None:
        self.plan = plan
        self.client = client
        self.tokens = tokens
        self.timeout = timeout
        self.credentials: GrantCache[AwsCredentials] = cache or GrantCache()
        self.calls = 0
        """AssumeRoleWithWebIdentity calls made (cache misses), for tests and metrics."""
        self._matchers = {rule: compile_matcher(rule.matcher) for rule in plan.role_rules
                          if rule.matcher is not None}
        """The rules' CEL matchers, compiled (the configuration checked they compile)."""

    def role_for(self, claims: dict[str, Any]) -> str:
        held = claims.get(self.plan.role_claim)
        for rule in self.plan.role_rules:
            matcher = self._matchers.get(rule)
            if matcher is not None:
                if matcher.matches(claims):
                    return rule.role_arn
            elif isinstance(held, list | dict) and rule.claim in held:
                return rule.role_arn
        if self.plan.fallback_role_arn is None:
            raise CredentialError(f"no roleMappings rule of {self.plan.config} matches the "
                                  f"caller's {self.plan.role_claim!r} claim, and it has no "
                                  "fallbackRoleArn")
        return self.plan.fallback_role_arn

    def _session_name(self, claims: dict[str, Any]) -> str:
        name = claims.get(self.plan.session_name_claim)
        if not isinstance(name, str) or not _SESSION_NAME.fullmatch(name):
            raise CredentialError(f"the caller's {self.plan.session_name_claim!r} claim is not "
                                  "a role session name (2 to 64 letters, digits and _+=,.@-)")
        return name

    async def sign(self, caller: Caller | None,
                   request: OutgoingRequest) -> list[tuple[str, str]]:
        """The headers that sign ``request`` for ``caller`` (raises :class:`CredentialError`)."""
        claims = caller.identity.claims if caller is not None else {}
        role = self.role_for(claims)
        session = self._session_name(claims)
        token = await subject_token(caller, provider=self.plan.subject_provider,
                                    tokens=self.tokens, config=self.plan.config)
        key = grant_key(token, self.plan.sts_url, role, session, str(self.plan.session_duration))
        try:
            credentials = await self.credentials.get(
                key, lambda: self._assume(token, role, session))
        except GrantError as exc:
            raise CredentialError(str(exc)) from None
        return sign(request, credentials, region=self.plan.region, service=self.plan.service,
                    now=datetime.now(UTC))

    async def _assume(self, token: str, role: str,
                      session: str) -> tuple[AwsCredentials, float]:
        self.calls += 1
        form = {"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15",
                "RoleArn": role, "RoleSessionName": session, "WebIdentityToken": token,
                "DurationSeconds": str(self.plan.session_duration)}
        what = f"STS AssumeRoleWithWebIdentity of {role} at {self.plan.sts_url}"
        try:
            with trio.fail_after(self.timeout):
                status, _, body = await self.client.request(
                    "POST", self.plan.sts_url, body=urlencode(form).encode(),
                    headers=[("content-type", "application/x-www-form-urlencoded"),
                             ("accept", "text/xml")],
                    limit=MAX_ANSWER_BYTES)
        except trio.TooSlowError:
            raise GrantError(f"{what} did not answer within {self.timeout:g} s") from None
        except HttpError as exc:
            raise GrantError(f"{what} failed: {exc}") from None
        try:  # a bounded answer of the configured STS; expat refuses entity expansion bombs
            root: ElementTree.Element | None = ElementTree.fromstring(body)  # noqa: S314
        except ElementTree.ParseError:
            root = None
        if status != 200:
            code = _text(root, "Code") if root is not None else None
            message = _text(root, "Message") if root is not None else None
            said = f": {_clean(code, token)}" if code else ""
            said += f" ({_clean(message, token)})" if message else ""
            raise GrantError(f"{what} was refused (HTTP {status}){said}")
        fields = {name: _text(root, name) if root is not None else None
                  for name in ("AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration")}
        expiration = fields["Expiration"]
        try:
            expires_at = datetime.fromisoformat(expiration or "").timestamp()
        except ValueError:
            expires_at = 0.0
        if (fields["AccessKeyId"] is None or fields["SecretAccessKey"] is None
                or expires_at <= time.time()):
            raise GrantError(f"the answer of {what} holds no valid credentials")
        credentials = AwsCredentials(str(fields["AccessKeyId"]), str(fields["SecretAccessKey"]),
                                     fields["SessionToken"] or "", expires_at)
        return credentials, self.credentials.reusable_until(credentials)
