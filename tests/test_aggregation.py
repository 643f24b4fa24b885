"""Aggregation: filters, overrides and the three conflict resolutions, and resource routing."""

from __future__ import annotations

import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from vmcp_trio.gateway.aggregation import BackendListing, Route, build_catalog, template_pattern
from vmcp_trio.resources.plan import AggregationPlan, ToolOverridePlan, WorkloadToolsPlan


def listings() -> list[BackendListing]:
    return [
        BackendListing("github", tools=[{"name": "search"}, {"name": "create_issue"}],
                       prompts=[{"name": "review"}],
                       resources=[{"uri": "repo://a"}, {"uri": "shared://x"}],
                       templates=[{"uriTemplate": "repo://{owner}/{name}"}]),
        BackendListing("jira", tools=[{"name": "search"}, {"name": "create_issue"}],
                       resources=[{"uri": "shared://x"}]),
    ]


def test_prefix_is_the_default_and_routes_back_to_original_names() -> None:
    catalog = build_catalog(listings(), AggregationPlan())
    assert [t["name"] for t in catalog.tools] == [
        "github_search", "github_create_issue", "jira_search", "jira_create_issue"]
    assert catalog.tool_routes["jira_search"] == Route("jira", "search")
    assert catalog.prompt_routes["github_review"] == Route("github", "review")


def test_lists_are_in_one_order_whatever_order_the_backends_answered_in() -> None:
    """2026-07-28 asks for a deterministic order across calls, replicas and restarts: the
    backends' sessions are opened concurrently, so the catalog must not follow their
    arrival."""
    for plan in (AggregationPlan(), AggregationPlan(conflict_resolution="manual"),
                 AggregationPlan(conflict_resolution="priority", priority_order=("jira",))):
        forward, backward = build_catalog(listings(), plan), build_catalog(listings()[::-1], plan)
        for kind in ("tools", "prompts", "resources", "templates"):
            assert getattr(forward, kind) == getattr(backward, kind), (plan, kind)


def test_custom_prefix_format() -> None:
    catalog = build_catalog(listings(), AggregationPlan(prefix_format="{workload}."))
    assert "jira.search" in catalog.tool_routes


def test_priority_keeps_the_highest_backend() -> None:
    plan = AggregationPlan(conflict_resolution="priority", priority_order=("jira", "github"))
    catalog = build_catalog(listings(), plan)
    assert catalog.tool_routes["search"] == Route("jira", "search")
    assert len(catalog.tools) == 2
    assert catalog.resource_routes["shared://x"] == "jira"


def test_manual_drops_unresolved_conflicts_and_reports_them() -> None:
    plan = AggregationPlan(conflict_resolution="manual", tools=(
        WorkloadToolsPlan("jira", overrides=(ToolOverridePlan("search", "jira_find", "Find"),)),
    ))
    catalog = build_catalog(listings(), plan)
    assert catalog.tool_routes["jira_find"] == Route("jira", "search")
    assert catalog.tool_routes["search"] == Route("github", "search")
    assert "create_issue" not in catalog.tool_routes
    assert any("'create_issue' is offered by github, jira" in c for c in catalog.conflicts)
    found = next(t for t in catalog.tools if t["name"] == "jira_find")
    assert found["description"] == "Find"


def test_manual_with_one_backend_means_no_prefix() -> None:
    catalog = build_catalog(listings()[:1], AggregationPlan(conflict_resolution="manual"))
    assert [t["name"] for t in catalog.tools] == ["search", "create_issue"]


def test_filter_keeps_listed_tools() -> None:
    plan = AggregationPlan(tools=(WorkloadToolsPlan("github", filter=("search",)),))
    catalog = build_catalog(listings(), plan)
    assert "github_create_issue" not in catalog.tool_routes
    assert "jira_create_issue" in catalog.tool_routes


def test_tools_hidden_by_exclusion_or_default_visibility() -> None:
    """excludeAllTools lists no backend tool; a workload's excludeAll hides its tools; under
    defaultToolVisibility deny only the backends with a tools entry list theirs. Prompts and
    resources stay listed."""
    names = lambda plan: [t["name"] for t in build_catalog(listings(), plan).tools]  # noqa: E731
    assert names(AggregationPlan(exclude_all_tools=True)) == []
    assert names(AggregationPlan(tools=(WorkloadToolsPlan("jira", exclude_all=True),))) == [
        "github_search", "github_create_issue"]
    deny = AggregationPlan(unlisted_tools_visible=False,
                           tools=(WorkloadToolsPlan("jira", filter=("search",)),))
    assert names(deny) == ["jira_search"]
    catalog = build_catalog(listings(), AggregationPlan(exclude_all_tools=True))
    assert catalog.prompt_routes["github_review"] == Route("github", "review")
    assert catalog.resource_routes["repo://a"] == "github"


def test_an_override_replaces_the_annotations_it_names() -> None:
    backends = [BackendListing("github", tools=[
        {"name": "delete_repo", "annotations": {"destructiveHint": False, "title": "Delete"}}])]
    plan = AggregationPlan(tools=(WorkloadToolsPlan("github", overrides=(ToolOverridePlan(
        "delete_repo", annotations=(("destructiveHint", True), ("readOnlyHint", False))),)),))
    (tool,) = build_catalog(backends, plan).tools
    assert tool["annotations"] == {"destructiveHint": True, "readOnlyHint": False,
                                   "title": "Delete"}


def test_resources_and_templates_route_by_uri() -> None:
    catalog = build_catalog(listings(), AggregationPlan())
    assert catalog.resource_backend("repo://a") == "github"
    assert catalog.resource_backend("shared://x") == "github"
    assert catalog.resource_backend("repo://octo/cat") == "github"
    assert catalog.resource_backend("other://z") is None
    assert catalog.template_owners["repo://{owner}/{name}"] == "github"


def test_template_patterns() -> None:
    assert template_pattern("test://template/{id}/data").matches("test://template/42/data")
    assert not template_pattern("test://template/{id}/data").matches("test://template/a/b/data")
    assert template_pattern("file:///{+path}").matches("file:///a/b/c.txt")
    assert template_pattern("search://q{?term,page}").matches("search://q?term=x&page=2")
    assert template_pattern("search://q{?term,page}").matches("search://q")
    assert not template_pattern("search://q{?term}").matches("search://qx")
    assert template_pattern("{x}-{y}.txt").matches("a-b-c.txt")
    assert not template_pattern("{x}-{y}.txt").matches("a/b-c.txt")
    assert template_pattern("mem://{a}{b}").matches("mem://")
    assert template_pattern("x{a}{?q}").matches("xab?a=b&c")


def test_a_hostile_template_costs_linear_time() -> None:
    """As a regular expression this template backtracked for seconds on this URI (a backend's
    template could stall the whole gateway); it must not."""
    started = time.perf_counter()
    for template in ("{a}{b}{c}{d}{e}{f}{g}{h}x", "{a}-{b}-{c}-{d}-{e}-{f}-{g}x",
                     "{+a}{+b}{+c}{+d}{+e}{+f}x"):
        assert not template_pattern(template).matches("-" * 2000 + "y")
    assert time.perf_counter() - started < 1.0


@settings(max_examples=500)
@given(st.lists(st.sampled_from(["a", "/", "-", "{x}", "{+y}", "{?q}", "{&r}", "?", "#"]),
                max_size=8),
       st.text(alphabet="a/-?#&=", max_size=20))
def test_the_matcher_agrees_with_a_regular_expression(pieces: list[str], uri: str) -> None:
    template = "".join(pieces)
    regex = ""
    position = 0
    for match in re.finditer(r"\{([+#./;?&]?)([^}]*)\}", template):
        regex += re.escape(template[position:match.start()])
        query, anything = r"(?:[?&][^#]*)?", ".*"
        regex += {"?": query, "&": query, "+": anything, "#": anything}.get(match.group(1),
                                                                          r"[^/?#]*")
        position = match.end()
    regex += re.escape(template[position:])
    assert template_pattern(template).matches(uri) == bool(re.fullmatch(regex, uri))
