"""Property tests: whatever the documents hold, validation answers with problems, never with
another exception, and a valid result always carries plans."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmcp_trio.resources import LoadOptions, validate_documents
from vmcp_trio.resources.loading import SourceDocument, load_text
from vmcp_trio.resources.models import KIND_MODELS
from vmcp_trio.resources.plan import GatewayPlan
from vmcp_trio.resources.problems import Problem
from vmcp_trio.resources.schema import _field_vocabulary

from .helpers import example_docs

KINDS = [*KIND_MODELS, "Secret", "Unknown"]
WORDS = [*_field_vocabulary(), "inline", "oidc", "anonymous", "tokenExchange", "prefix",
         "redis", "memory", "https://a.example.com", "http://127.0.0.1:1/mcp", "30s", "25h",
         "corp", "github", "g", "s"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.floats(allow_nan=True), st.sampled_from(WORDS), st.text(max_size=20))
trees = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(WORDS) | st.text(max_size=8),
                                            inner, max_size=5)),
    max_leaves=30,
)


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(KINDS))
    api = "v1" if kind == "Secret" else "toolhive.stacklok.dev/v1alpha1"
    doc: dict[str, Any] = {
        "apiVersion": draw(st.sampled_from([api, api, "x/v1"])),
        "kind": kind,
        "metadata": {"name": draw(st.sampled_from(["g", "s", "corp", "a-b", "Bad"]))},
    }
    if draw(st.booleans()):
        doc["spec" if kind != "Secret" else "stringData"] = draw(trees)
    return doc


def check(docs: list[Any]) -> None:
    parsed = [SourceDocument("p.yaml", i + 1, d) for i, d in enumerate(docs)]
    result = validate_documents(parsed, LoadOptions())
    assert all(isinstance(p, Problem) for p in result.problems)
    assert all(str(p) for p in result.problems)
    if result.ok:
        assert all(isinstance(p, GatewayPlan) for p in result.plans)
    else:
        assert result.plans == ()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(documents(), max_size=6))
def test_random_documents_only_give_problems(docs: list[dict[str, Any]]) -> None:
    check(docs)


EXAMPLE = example_docs("embedded-auth-server.yaml")


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, index))
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_example_only_gives_problems(data: st.DataObject) -> None:
    """One to three random edits anywhere in a full, valid configuration."""
    docs = copy.deepcopy(EXAMPLE)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(docs)))
        if not path:
            continue
        parent: Any = docs
        for part in path[:-1]:
            parent = parent[part]
        if data.draw(st.booleans()):
            parent[path[-1]] = data.draw(trees)
        elif isinstance(parent, dict):
            del parent[path[-1]]
    check(docs)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300) | st.binary(max_size=300).map(bytes))
def test_random_text_only_gives_problems(text: str | bytes) -> None:
    docs, problems = load_text(text, "t.yaml")
    assert all(isinstance(p, Problem) for p in problems)
    check([d.body for d in docs])


@settings(max_examples=200, deadline=None)
@given(trees)
def test_any_yaml_tree_round_trips_through_the_loader(tree: Any) -> None:
    text = yaml.safe_dump(tree)
    docs, problems = load_text(text, "t.yaml")
    assert not problems
    if docs:  # compare as text: NaN is never equal to itself
        assert yaml.safe_dump(docs[0].body) == text
