"""Fixtures: the examples as documents, ready to be broken one field at a time; the upstream
identity providers of the authorization server tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .fixtures.idp import Idp, running_idp
from .helpers import example_docs, free_port


@pytest.fixture
def embedded() -> list[dict[str, Any]]:
    return example_docs("embedded-auth-server.yaml")


@pytest.fixture
def inline_oidc() -> list[dict[str, Any]]:
    return example_docs("oidc-inline.yaml")


@pytest.fixture
def anonymous() -> list[dict[str, Any]]:
    return example_docs("anonymous.yaml")


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[int, Idp, Idp]]:
    """vmcp's port (chosen first: the upstreams must know its callback) and two oidc-provider
    instances, ``corp`` and ``hub``, for the embedded authorization server's chained login."""
    port = free_port()
    callback = (f"http://127.0.0.1:{port}/oauth/callback",)
    with running_idp(redirect_uris=callback) as corp, \
            running_idp(redirect_uris=callback) as hub:
        yield port, corp, hub
