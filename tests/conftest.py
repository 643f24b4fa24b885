"""Fixtures: the examples as documents, ready to be broken one field at a time; the upstream
identity providers of the authorization server tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .authserver_helpers import chained_upstreams
from .fixtures.idp import Idp
from .helpers import example_docs


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
    """vmcp's port and the two upstream providers of the embedded authorization server."""
    with chained_upstreams() as started:
        yield started
