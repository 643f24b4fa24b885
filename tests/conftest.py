"""Fixtures for every test module: the examples as documents, ready to be broken one field at a
time (``embedded``, ``inline_oidc``, ``anonymous``); the two upstream identity providers of the
authorization server tests (``upstreams``, once per module) and a gateway with the embedded
authorization server in front of them, in the test's process (``authserver_stack``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from .authserver_helpers import Stack, as_docs, chained_upstreams, issuer_of, running_stack
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


@pytest.fixture
async def authserver_stack(upstreams: tuple[int, Idp, Idp]) -> AsyncIterator[Stack]:
    """A gateway with the embedded authorization server in front of the two upstreams, in the
    test's process."""
    _, corp, hub = upstreams
    async with running_stack(upstreams, as_docs(issuer_of(upstreams), corp, hub)) as stack:
        yield stack
