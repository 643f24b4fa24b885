"""Fixtures: the examples as documents, ready to be broken one field at a time."""

from __future__ import annotations

from typing import Any

import pytest

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
