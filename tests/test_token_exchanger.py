"""The RFC 8693 client's own rules, against a small exchange service written here.

The service is a stand-in (a stdlib HTTP server in a thread): no installable program offers
RFC 8693, and these cases need answers a real one would rarely give on demand: refusing HTTP
Basic client authentication, malformed answers, failures to count back-off against.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import pytest
import trio

from vmcp_trio.auth.outgoing.exchange import ExchangeError, TokenExchanger
from vmcp_trio.http.client import HttpClient

from .scripted_http import Asked, answering


@dataclass
class Service:
    url: str = ""
    basic_refused: bool = False
    answer: dict[str, Any] | None = None
    status: int = 200
    seen: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def service() -> Iterator[Service]:
    state = Service()

    def respond(asked: Asked) -> tuple[int, str, bytes]:
        form = {k: v[0] for k, v in parse_qs(asked.body.decode()).items()}
        basic = asked.headers.get("authorization")
        state.seen.append({"form": form, "basic": basic})
        if basic and state.basic_refused:
            status, body = 401, {"error": "invalid_client"}
        else:
            status = state.status
            body = state.answer if state.answer is not None else {
                "access_token": f"exchanged-{len(state.seen)}", "token_type": "Bearer",
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "expires_in": 300}
        return status, "application/json", json.dumps(body).encode()

    with answering(respond) as url:
        state.url = f"{url}/token"
        yield state


def exchanger(service: Service, **options: Any) -> TokenExchanger:
    return TokenExchanger(HttpClient(), token_url=service.url, client_id="vmcp client",
                          client_secret="s3cret:x", **options)


async def test_basic_then_post_when_the_service_refuses_basic(service: Service) -> None:
    service.basic_refused = True
    client = exchanger(service)
    token = await client.exchange("subject", audience="api")
    assert token.access_token.startswith("exchanged-")
    first, second = service.seen
    user, _, password = base64.b64decode(first["basic"].split()[1]).decode().partition(":")
    assert (user, password) == ("vmcp+client", "s3cret%3Ax")  # RFC 6749 2.3.1 encoding
    assert second["basic"] is None
    assert second["form"]["client_id"] == "vmcp client"
    assert second["form"]["client_secret"] == "s3cret:x"
    await client.exchange("another subject", audience="api")
    assert service.seen[-1]["basic"] is None  # remembered


async def test_what_is_sent(service: Service) -> None:
    await exchanger(service).exchange("the-subject", audience="api", scopes=("a", "b"))
    form = service.seen[0]["form"]
    assert form == {"grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                    "subject_token": "the-subject",
                    "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
                    "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
                    "audience": "api", "scope": "a b"}


@pytest.mark.parametrize(("answer", "fragment"), [
    ({"token_type": "Bearer", "issued_token_type": "x", "expires_in": 60}, "access_token"),
    ({"access_token": "t", "token_type": "Bearer", "expires_in": 60}, "issued_token_type"),
    ({"access_token": "t", "token_type": "MAC", "issued_token_type": "x"}, "token_type"),
    ({"access_token": "t", "token_type": "Bearer", "issued_token_type": "x",
      "expires_in": -5}, "expires_in"),
    ({"access_token": "t", "token_type": "Bearer", "issued_token_type": "x",
      "expires_in": "soon"}, "expires_in"),
])
async def test_malformed_answers_are_refused(service: Service, answer: dict[str, Any],
                                             fragment: str) -> None:
    service.answer = answer
    with pytest.raises(ExchangeError, match=fragment):
        await exchanger(service).exchange("subject", audience="api")


async def test_a_failure_is_remembered_briefly_then_retried(service: Service) -> None:
    service.status = 500
    client = exchanger(service, failure_backoff=0.5)
    for _ in range(5):
        with pytest.raises(ExchangeError, match="HTTP 500"):
            await client.exchange("subject", audience="api")
    assert len(service.seen) == 1  # the back-off answered the other four
    service.status = 200
    await trio.sleep(0.6)
    assert (await client.exchange("subject", audience="api")).access_token
    assert len(service.seen) == 2


async def test_cached_until_shortly_before_expiry(service: Service) -> None:
    service.answer = {"access_token": "short", "token_type": "Bearer",
                      "issued_token_type": "x", "expires_in": 1}
    client = exchanger(service)
    await client.exchange("subject", audience="api")
    await client.exchange("subject", audience="api")
    assert len(service.seen) == 1
    await trio.sleep(1.0)  # a 1 s token is reused for 0.9 s at most
    await client.exchange("subject", audience="api")
    assert len(service.seen) == 2
    await client.exchange("subject", audience="other-api")
    assert len(service.seen) == 3  # another audience is another key


async def test_the_secret_never_appears_in_errors(service: Service) -> None:
    service.status = 400
    service.answer = {"error": "invalid_grant", "error_description": "s3cret:x was wrong"}
    with pytest.raises(ExchangeError) as caught:
        await exchanger(service).exchange("subject-token-value", audience="api")
    assert "s3cret" not in str(caught.value) and "subject-token-value" not in str(caught.value)
