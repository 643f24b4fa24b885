"""Fuzz the OAuth request rules of the embedded authorization server: registration documents
(both with and without confidential clients), redirect URI matching, scope, resource and PKCE
parameters. Only OAuthError may escape, and what is accepted must keep the rules' promises: a
registered redirect URI matches itself, a match is either exact or a loopback IP literal, scope
tokens are unique and well formed, a resource is one of the allowed ones.

Input that is JSON is also fed field by field (any JSON type), since a form or query decoder
upstream of these functions may change."""

from __future__ import annotations

import contextlib
import re
from typing import Any

import orjson

from vmcp_trio.authserver.validation import (
    OAuthError,
    check_pkce_request,
    check_resource,
    parse_scope,
    redirect_uri_matches,
    validate_client_metadata,
    verify_pkce,
)

REGISTERED = ("https://app.example/callback", "http://127.0.0.1:8080/cb", "http://[::1]/cb",
              "http://localhost:8666/callback", "com.example.app:/oauth2redirect")
RESOURCES = ("https://mcp.example/mcp", "https://mcp.example/other")
SCOPES = ("mcp:tools", "openid", "read")
# RFC 7636 appendix B: the one verifier whose S256 challenge we know.
VERIFIER = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")


def _registration(document: object) -> None:
    for allow_confidential in (False, True):
        try:
            metadata = validate_client_metadata(document, allow_confidential=allow_confidential)
        except OAuthError:
            continue
        if not 1 <= len(metadata.redirect_uris) <= 10:
            raise AssertionError("accepted a registration with a bad number of redirect_uris")
        if not allow_confidential and metadata.token_endpoint_auth_method != "none":
            raise AssertionError("accepted a confidential client")
        for uri in metadata.redirect_uris:
            if not redirect_uri_matches(metadata.redirect_uris, uri) or "#" in uri:
                raise AssertionError(f"registered {uri!r} does not match itself")


def _text(text: str) -> None:
    if redirect_uri_matches(REGISTERED, text) and text not in REGISTERED and not (
            text.startswith(("http://127.0.0.1", "http://[::1]"))):
        raise AssertionError(f"{text!r} matched without being registered")
    for allowed in (None, SCOPES):
        with contextlib.suppress(OAuthError):
            scopes = parse_scope(text, allowed=allowed)
            if len(set(scopes)) != len(scopes) or not all(map(_SCOPE_TOKEN.fullmatch, scopes)):
                raise AssertionError(f"odd scopes {scopes!r}")
    _parameters(text, text, text)


def _parameters(resource: Any, challenge: Any, verifier: Any) -> None:
    with contextlib.suppress(OAuthError):
        if check_resource(resource, allowed=RESOURCES) not in (None, *RESOURCES):
            raise AssertionError("accepted a resource that is not allowed")
    with contextlib.suppress(OAuthError):
        check_pkce_request(challenge, "S256")
    with contextlib.suppress(OAuthError):
        verify_pkce(CHALLENGE, "S256", verifier)
        if verifier != VERIFIER:
            raise AssertionError("another verifier matched the challenge")


def TestOneInput(data: bytes) -> None:
    _text(data.decode("utf-8", errors="replace"))
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        return
    _registration(document)
    if isinstance(document, dict):
        with contextlib.suppress(OAuthError):
            parse_scope(document.get("scope"))
        _parameters(document.get("resource"), document.get("code_challenge"),
                    document.get("code_verifier"))
        uri = document.get("redirect_uri")
        if isinstance(uri, str):
            redirect_uri_matches(REGISTERED, uri)


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
