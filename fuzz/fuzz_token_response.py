"""Fuzz the reading of an upstream token endpoint's answer (vmcp_trio/auth/oauth/tokens.py, used
by the authorization server's upstream logins and by ``vmcp proxy``): ``token_request`` on an
answer of any status and body (JSON or not; the HTTP client, the only I/O, replaced; run under
``trio.run`` for its deadline), then ``parse_token_response`` of its JSON with and without a
``tokenResponseMapping`` (dot paths, as the configuration accepts them), and ``first_text`` (a
userInfo ``fieldMapping``) over the same paths.

Only TokenEndpointError escapes, and its message never holds the client secret, the code or the
verifier the request carried (unless the input itself does). ``token_request`` gives a document
only for a 200 JSON object without an OAuth ``error``; its error's ``status`` is the answer's when
the body was JSON, and ``oauth_error`` is set exactly for an error answer. A token response has a
non-empty string access token, exactly what the access token path names (a path that names
nothing is an error, not a crash); a refresh token that is None or what its path names; an
``expires_at`` that is None or within MAX_EXPIRES_IN seconds after now, exactly now plus the
number its path names; scope, token type and ID token of the documented types.

The input: a byte (bits 0-2: the HTTP status; bits 3-4: the client authentication), a line of up
to four comma-separated paths (access token, scope, refresh token, expires_in; an empty line: no
mapping), then the body."""

from __future__ import annotations

import re
from typing import Any

import orjson
import trio
from pydantic import ValidationError

from vmcp_trio.auth.oauth.tokens import (
    MAX_EXPIRES_IN,
    ClientAuthMethod,
    ClientCredentials,
    TokenEndpointError,
    first_text,
    parse_token_response,
    token_request,
)
from vmcp_trio.http.client import ConnectGuard, HttpClient
from vmcp_trio.resources.authserver_models import TokenResponseMapping
from vmcp_trio.resources.plan import TokenResponseMappingPlan

STATUSES = (200, 200, 200, 201, 400, 401, 500, 503)
METHODS: tuple[ClientAuthMethod, ...] = ("client_secret_basic", "client_secret_post", "none")
SECRET, CODE, VERIFIER = "cl1ent-s3cret-value", "auth-c0de-value-123", "v3rifier-" + "x" * 40
FORM = {"grant_type": "authorization_code", "code": CODE, "code_verifier": VERIFIER,
        "redirect_uri": "https://as.example/oauth/callback"}
NOW = 1_800_000_000.0
_INDEX = re.compile(r"[0-9]+")


class Answering(HttpClient):
    """An HTTP client whose one exchange is answered from the input."""

    answer: tuple[int, bytes] = (200, b"")

    async def request(self, method: str, url: str, *, headers: Any = (), body: bytes = b"",
                      limit: int = 0, guard: ConnectGuard | None = None
                      ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        return self.answer[0], [], self.answer[1]


CLIENT = Answering()  # one: an HTTP client's TLS context costs milliseconds


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def dig(node: Any, path: str) -> Any:
    """What a dot path names (a number indexes an array), or None."""
    for part in path.split("."):
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and _INDEX.fullmatch(part) and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def mapping_of(line: str) -> TokenResponseMappingPlan | None:
    """The plan of a ``tokenResponseMapping`` (as authserver_rules makes it), or None when the
    line is empty or the configuration would refuse it."""
    paths = line.split(",")[:4]
    if not line:
        return None
    names = ("accessTokenPath", "scopePath", "refreshTokenPath", "expiresInPath")
    try:
        config = TokenResponseMapping.model_validate(
            {name: path for name, path in zip(names, paths, strict=False) if path or
             name == "accessTokenPath"})
    except ValidationError:
        return None
    return TokenResponseMappingPlan(config.access_token_path, config.scope_path or "scope",
                                    config.refresh_token_path or "refresh_token",
                                    config.expires_in_path or "expires_in")


def check_quiet(exc: TokenEndpointError, text: str) -> None:
    for secret in (SECRET, CODE, VERIFIER):
        check(secret in text or secret not in str(exc), f"{exc} holds a secret")


def check_parse(document: dict[str, Any], mapping: TokenResponseMappingPlan | None,
                text: str) -> None:
    plan = mapping or TokenResponseMappingPlan("access_token")
    access, seconds = dig(document, plan.access_token_path), dig(document, plan.expires_in_path)
    try:
        tokens = parse_token_response(document, mapping, now=NOW)
    except TokenEndpointError as exc:
        check_quiet(exc, text)
        check(not (isinstance(access, str) and access) or seconds is not None,
              f"refused {document!r} through {plan!r}")
        return
    refresh = dig(document, plan.refresh_token_path)
    check(isinstance(access, str) and tokens.access_token == access != ""
          and tokens.refresh_token == (refresh if isinstance(refresh, str) and refresh else None)
          and (tokens.expires_at is None or NOW <= tokens.expires_at <= NOW + MAX_EXPIRES_IN)
          and isinstance(tokens.scope, str | None) and isinstance(tokens.token_type, str | None)
          and tokens.id_token != "" and isinstance(tokens.id_token, str | None),
          f"read {document!r} through {plan!r} as {tokens!r}")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds:
        check(tokens.expires_at == NOW + seconds, f"expires_in {seconds!r} -> {tokens!r}")
    for path in (plan.access_token_path, plan.scope_path, plan.refresh_token_path):
        found = first_text(document, (path,))
        check(found is None or found.strip() != "", f"first_text gave {found!r}")


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    status, method = STATUSES[data[0] & 7], METHODS[(data[0] >> 3 & 3) % 3]
    line, _, body = data[1:].partition(b"\n")
    text = data.decode("utf-8", errors="replace")
    credentials = ClientCredentials("vmcp", None if method == "none" else SECRET, method)
    CLIENT.answer = (status, body)
    try:
        document = trio.run(lambda: token_request(
            CLIENT, "https://idp.example/token", FORM, credentials, timeout=5.0,
            what="authorization code"))
    except TokenEndpointError as exc:
        check_quiet(exc, text)
        try:
            answer = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            answer = None
        error = answer.get("error") if isinstance(answer, dict) else None
        check((exc.oauth_error is not None) == (isinstance(error, str) and error != "")
              and (exc.oauth_error is None or exc.status == status),
              f"{exc!r}: oauth_error {exc.oauth_error!r}, status {exc.status!r}")
        check(exc.status in (None, status) and (exc.status is None) == (
            str(exc).startswith("the token endpoint failed")), f"{exc!r} of HTTP {status}")
        return
    error = document.get("error")
    check(status == 200 and isinstance(document, dict)
          and not (isinstance(error, str) and error), f"HTTP {status} gave {document!r}")
    check_parse(document, None, text)
    mapping = mapping_of(line.decode("utf-8", errors="replace"))
    if mapping is not None:
        check_parse(document, mapping, text)


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
