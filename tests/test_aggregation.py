"""Aggregation: filters, overrides and the three conflict resolutions, and resource routing."""

from __future__ import annotations

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


def test_resources_and_templates_route_by_uri() -> None:
    catalog = build_catalog(listings(), AggregationPlan())
    assert catalog.resource_backend("repo://a") == "github"
    assert catalog.resource_backend("shared://x") == "github"
    assert catalog.resource_backend("repo://octo/cat") == "github"
    assert catalog.resource_backend("other://z") is None
    assert catalog.template_owners["repo://{owner}/{name}"] == "github"


def test_template_patterns() -> None:
    assert template_pattern("test://template/{id}/data").fullmatch("test://template/42/data")
    assert not template_pattern("test://template/{id}/data").fullmatch("test://template/a/b/data")
    assert template_pattern("file:///{+path}").fullmatch("file:///a/b/c.txt")
    assert template_pattern("search://q{?term,page}").fullmatch("search://q?term=x&page=2")
