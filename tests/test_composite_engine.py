"""The composite tool engine against ports made of plain async functions, the plan builder's field
paths, and every composite tool definition of the collected ToolHive manifests."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing
import yaml

from vmcp_trio.composite.engine import StepFailed, WorkflowPorts, run_workflow
from vmcp_trio.resources.composite_plan import PlanError, WorkflowPlan, build_plan

from .helpers import TOOLHIVE_MANIFESTS


def plan_of(steps: list[dict[str, Any]], **extra: Any) -> WorkflowPlan:
    return build_plan({"name": "wf", "description": "test workflow", "steps": steps, **extra})


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


class Backend:
    """A fake gateway session: scripted tools, a recorded audit trail."""

    def __init__(self, **tools: Any) -> None:
        self.tools = tools
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.audit: list[tuple[str, str]] = []
        self.progress: list[tuple[int, int]] = []
        self.answers: list[dict[str, Any]] = []
        self.prompts: list[str] = []

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, arguments))
        result = self.tools[name]
        return await result(arguments) if callable(result) else result

    async def elicit(self, message: str, schema: dict[str, Any]) -> dict[str, Any]:
        self.prompts.append(message)
        return self.answers.pop(0)

    async def on_progress(self, done: int, total: int, message: str) -> None:
        self.progress.append((done, total))

    async def started(self, step_id: str) -> None:
        self.audit.append((step_id, "started"))

    async def finished(self, step_id: str, outcome: str, seconds: float) -> None:
        self.audit.append((step_id, outcome))

    def ports(self) -> WorkflowPorts:
        return WorkflowPorts(self.call_tool, self.elicit, self.on_progress, self.started,
                             self.finished)  # fmt: skip


def structured(result: dict[str, Any]) -> Any:
    assert not result.get("isError"), result
    assert json.loads(result["content"][0]["text"]) == result.get("structuredContent")
    return result["structuredContent"]


def error_text(result: dict[str, Any]) -> str:
    assert result["isError"] is True
    return str(result["content"][0]["text"])


# --- the DAG


async def test_dag_runs_independent_steps_in_parallel_then_joins_their_outputs() -> None:
    both_running = trio.Event()
    running = 0

    async def fetch(args: dict[str, Any]) -> dict[str, Any]:
        nonlocal running
        running += 1
        if running == 2:
            both_running.set()
        await both_running.wait()  # deadlocks unless the two fetches run at the same time
        return {"structuredContent": {"body": f"page {args['url']}"}, "content": []}

    async def combine(args: dict[str, Any]) -> dict[str, Any]:
        return {"structuredContent": {"joined": args["text"], "n": args["n"]}}

    backend = Backend(fetch=fetch, combine=combine)
    plan = plan_of(
        [
            {"id": "a", "tool": "fetch", "arguments": {"url": "{{.params.u1}}"}},
            {"id": "b", "tool": "fetch", "arguments": {"url": "{{.params.u2}}"}},
            {"id": "c", "tool": "combine", "dependsOn": ["a", "b"],
             "arguments": {"text": "{{.steps.a.output.body}} + {{.steps.b.output.body}}",
                           "n": "{{.params.n}}"}},
        ],
        parameters={"type": "object", "required": ["u1", "u2"],
                    "properties": {"u1": {"type": "string"}, "u2": {"type": "string"},
                                   "n": {"type": "integer", "default": 3}}},
    )  # fmt: skip
    with trio.fail_after(5):
        result = await run_workflow(plan, {"u1": "x", "u2": "y"}, backend.ports())
    assert structured(result) == {"joined": "page x + page y", "n": 3}
    assert backend.calls[-1] == ("combine", {"text": "page x + page y", "n": 3})
    assert [s for s, o in backend.audit if o == "started"][-1] == "c"
    assert backend.progress[-1] == (3, 3)


async def test_text_content_is_the_output_when_there_is_no_structured_content() -> None:
    backend = Backend(t=text('{"v": 1}'), u={"structuredContent": {"ok": True}})
    plan = plan_of([
        {"id": "a", "tool": "t"},
        {"id": "b", "tool": "u", "dependsOn": ["a"],
         "arguments": {"v": "{{(fromJson .steps.a.output.text).v}}",
                       "same": "{{.steps.a.content.text}}"}},
    ])  # fmt: skip
    assert structured(await run_workflow(plan, {}, backend.ports())) == {"ok": True}
    assert backend.calls[1][1] == {"v": 1, "same": '{"v": 1}'}


async def test_a_false_condition_skips_the_step_with_its_default_results() -> None:
    backend = Backend(scan={"structuredContent": {"vulns": 2}}, report={"structuredContent": {}})
    plan = plan_of([
        {"id": "scan", "tool": "scan", "condition": "{{.params.run_scan}}",
         "defaultResults": {"vulns": 0}},
        {"id": "report", "tool": "report", "dependsOn": ["scan"],
         "arguments": {"count": "{{.steps.scan.output.vulns}}",
                       "status": "{{.steps.scan.status}}"}},
    ])  # fmt: skip
    await run_workflow(plan, {"run_scan": False}, backend.ports())
    assert backend.calls == [("report", {"count": 0, "status": "skipped"})]
    assert ("scan", "skipped") in backend.audit
    backend.calls.clear()
    await run_workflow(plan, {"run_scan": True}, backend.ports())
    assert backend.calls[-1] == ("report", {"count": 2, "status": "completed"})


async def test_a_condition_that_is_not_boolean_fails_the_step() -> None:
    plan = plan_of([{"id": "a", "tool": "t", "condition": "maybe {{.params.x}}"}])
    message = error_text(await run_workflow(plan, {"x": 1}, Backend(t={}).ports()))
    assert "step 'a'" in message and "'true' or 'false'" in message


# --- elicitation


def approval_plan(on_decline: str | None = None, on_cancel: str | None = None) -> WorkflowPlan:
    ask: dict[str, Any] = {"id": "approval", "type": "elicitation",
                           "message": "Deploy {{.params.env}}?",
                           "schema": {"type": "object",
                                      "properties": {"ok": {"type": "boolean"}}}}  # fmt: skip
    if on_decline:
        ask["onDecline"] = {"action": on_decline}
    if on_cancel:
        ask["onCancel"] = {"action": on_cancel}
    return plan_of([
        ask,
        {"id": "deploy", "tool": "deploy", "dependsOn": ["approval"],
         "condition": '{{eq .steps.approval.output.action "accept"}}',
         "arguments": {"confirmed": "{{.steps.approval.output.content.ok}}"}},
    ])  # fmt: skip


async def test_elicitation_accept_feeds_the_next_step() -> None:
    backend = Backend(deploy={"structuredContent": {"done": True}})
    backend.answers = [{"action": "accept", "content": {"ok": True}}]
    result = await run_workflow(approval_plan(), {"env": "prod"}, backend.ports())
    assert structured(result) == {"done": True}
    assert backend.prompts == ["Deploy prod?"]
    assert backend.calls == [("deploy", {"confirmed": True})]


@pytest.mark.parametrize("answer", ["decline", "cancel"])
@pytest.mark.parametrize("handler", [None, "abort"])
async def test_elicitation_decline_or_cancel_aborts_by_default(
    answer: str, handler: str | None
) -> None:
    backend = Backend(deploy={})
    backend.answers = [{"action": answer}]
    plan = approval_plan(on_decline=handler, on_cancel=handler)
    message = error_text(await run_workflow(plan, {"env": "prod"}, backend.ports()))
    assert "step 'approval'" in message
    assert ("declined" if answer == "decline" else "cancelled") in message
    assert backend.calls == []


@pytest.mark.parametrize("answer", ["decline", "cancel"])
async def test_elicitation_continue_goes_on_with_the_action_as_output(answer: str) -> None:
    backend = Backend(deploy={"structuredContent": {"done": True}})
    backend.answers = [{"action": answer}]
    plan = approval_plan(on_decline="continue", on_cancel="continue")
    result = await run_workflow(plan, {"env": "prod"}, backend.ports())
    # deploy's condition is false: the last completed step is the elicitation
    assert structured(result) == {"action": answer}
    assert backend.calls == []


@pytest.mark.parametrize("answer", ["decline", "cancel"])
async def test_elicitation_skip_remaining_skips_every_later_step(answer: str) -> None:
    backend = Backend(deploy={}, notify={})
    backend.answers = [{"action": answer}]
    plan = plan_of([
        {"id": "ask", "type": "elicitation", "message": "go?",
         "onDecline": {"action": "skip_remaining"}, "onCancel": {"action": "skip_remaining"}},
        {"id": "deploy", "tool": "deploy", "dependsOn": ["ask"]},
        {"id": "notify", "tool": "notify", "dependsOn": ["deploy"]},
    ])  # fmt: skip
    result = await run_workflow(plan, {}, backend.ports())
    assert structured(result) == {"action": answer, "skipped": True}
    assert backend.calls == []
    assert ("deploy", "skipped") in backend.audit and ("notify", "skipped") in backend.audit


async def test_elicitation_without_client_support_fails() -> None:
    ports = WorkflowPorts(Backend().call_tool)
    message = error_text(await run_workflow(approval_plan(), {"env": "x"}, ports))
    assert "elicitation is not available" in message


# --- failures


def failing(times: int, error: str = "backend down") -> Any:
    calls = {"n": 0}

    async def tool(args: dict[str, Any]) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] <= times:
            raise StepFailed(error)
        return {"structuredContent": {"attempt": calls["n"]}}

    return tool


async def test_on_error_abort_names_the_step_and_cancels_the_others() -> None:
    cancelled = False

    async def slow(args: dict[str, Any]) -> dict[str, Any]:
        nonlocal cancelled
        try:
            await trio.sleep_forever()
        finally:
            cancelled = True
        raise AssertionError("unreachable")

    backend = Backend(bad=failing(99), slow=slow, after={})
    plan = plan_of([
        {"id": "broken", "tool": "bad"},
        {"id": "waiting", "tool": "slow"},
        {"id": "later", "tool": "after", "dependsOn": ["broken"]},
    ])  # fmt: skip
    with trio.fail_after(5):
        message = error_text(await run_workflow(plan, {}, backend.ports()))
    assert message == "Workflow execution failed: step 'broken' (tool 'bad'): backend down"
    assert cancelled
    assert sorted(c[0] for c in backend.calls) == ["bad", "slow"]


async def test_is_error_results_are_failures_with_their_text() -> None:
    backend = Backend(bad={"isError": True, "content": [{"type": "text", "text": "no such repo"}]})
    message = error_text(await run_workflow(plan_of([{"id": "x", "tool": "bad"}]), {},
                                            backend.ports()))  # fmt: skip
    assert message.endswith("step 'x' (tool 'bad'): no such repo")


async def test_on_error_continue_uses_default_results() -> None:
    backend = Backend(bad=failing(99), use={"structuredContent": {"ok": 1}})
    plan = plan_of([
        {"id": "opt", "tool": "bad", "onError": {"action": "continue"},
         "defaultResults": {"value": "fallback"}},
        {"id": "use", "tool": "use", "dependsOn": ["opt"],
         "arguments": {"v": "{{.steps.opt.output.value}}", "s": "{{.steps.opt.status}}",
                       "e": "{{.steps.opt.error}}"}},
    ])  # fmt: skip
    assert structured(await run_workflow(plan, {}, backend.ports())) == {"ok": 1}
    assert backend.calls[-1][1] == {"v": "fallback", "s": "failed", "e": "backend down"}
    assert ("opt", "failed") in backend.audit


async def test_retry_succeeds_on_the_second_attempt(autojump_clock: trio.testing.MockClock) -> None:
    backend = Backend(flaky=failing(1))
    plan = plan_of(
        [
            {
                "id": "f",
                "tool": "flaky",
                "onError": {"action": "retry", "retryCount": 3, "retryDelay": "2s"},
            }
        ]
    )
    start = trio.current_time()
    assert structured(await run_workflow(plan, {}, backend.ports())) == {"attempt": 2}
    assert trio.current_time() - start == pytest.approx(2.0)


async def test_retry_exhausted_fails_after_backing_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = Backend(flaky=failing(99))
    plan = plan_of(
        [
            {
                "id": "f",
                "tool": "flaky",
                "onError": {"action": "retry", "retryCount": 2, "retryDelay": "1s"},
            }
        ]
    )
    start = trio.current_time()
    message = error_text(await run_workflow(plan, {}, backend.ports()))
    assert "step 'f'" in message and "backend down" in message
    assert len(backend.calls) == 3
    assert trio.current_time() - start == pytest.approx(1.0 + 1.5)


async def test_a_step_timeout_is_a_failure_under_on_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def hang(args: dict[str, Any]) -> dict[str, Any]:
        await trio.sleep(3600)
        return {}

    backend = Backend(hang=hang, next={"structuredContent": {"after": True}})
    aborting = plan_of([{"id": "h", "tool": "hang", "timeout": "30s"}])
    message = error_text(await run_workflow(aborting, {}, backend.ports()))
    assert message.endswith("step 'h' (tool 'hang'): timed out after 30s")
    continuing = plan_of([
        {"id": "h", "tool": "hang", "timeout": "30s", "onError": {"action": "continue"}},
        {"id": "n", "tool": "next", "dependsOn": ["h"]},
    ])  # fmt: skip
    start = trio.current_time()
    assert structured(await run_workflow(continuing, {}, backend.ports())) == {"after": True}
    assert trio.current_time() - start == pytest.approx(30.0)


async def test_an_elicitation_timeout_counts_as_cancel(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def never(message: str, schema: dict[str, Any]) -> dict[str, Any]:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    plan = plan_of([{"id": "ask", "type": "elicitation", "message": "?", "timeout": "1m",
                     "onCancel": {"action": "continue"}}])  # fmt: skip
    result = await run_workflow(plan, {}, WorkflowPorts(Backend().call_tool, never))
    assert structured(result) == {"action": "timeout"}


async def test_the_workflow_timeout_stops_everything(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow(args: dict[str, Any]) -> dict[str, Any]:
        await trio.sleep(100)
        return {"structuredContent": {}}

    plan = plan_of(
        [{"id": "a", "tool": "slow"}, {"id": "b", "tool": "slow", "dependsOn": ["a"]}],
        timeout="150s",
    )
    start = trio.current_time()
    message = error_text(await run_workflow(plan, {}, Backend(slow=slow).ports()))
    assert message == "Workflow execution failed: workflow timed out after 150s"
    assert trio.current_time() - start == pytest.approx(150.0)


async def test_cancelling_the_caller_cancels_every_step() -> None:
    entered, cancelled = trio.Event(), []

    async def slow(args: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.append(args["i"])
        raise AssertionError("unreachable")

    plan = plan_of([{"id": f"s{i}", "tool": "slow", "arguments": {"i": i}} for i in range(3)])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_workflow, plan, {}, Backend(slow=slow).ports())
        await entered.wait()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert sorted(cancelled) == [0, 1, 2]


# --- forEach


async def test_for_each_respects_max_parallel_and_aggregates() -> None:
    active = peak = 0

    async def check(args: dict[str, Any]) -> dict[str, Any]:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await trio.sleep(0.01)
        active -= 1
        return {"structuredContent": {"name": args["name"], "i": args["i"]}}

    backend = Backend(list={"structuredContent": {"repos": [{"name": f"r{i}"} for i in range(7)]}},
                      check=check)  # fmt: skip
    plan = plan_of([
        {"id": "list", "tool": "list"},
        {"id": "each", "type": "forEach", "dependsOn": ["list"], "maxParallel": 2,
         "collection": "{{json .steps.list.output.repos}}", "itemVar": "repo",
         "step": {"type": "tool", "tool": "check",
                  "arguments": {"name": "{{.forEach.repo.name}}", "i": "{{.forEach.index}}"}}},
    ])  # fmt: skip
    out = structured(await run_workflow(plan, {}, backend.ports()))
    assert peak == 2
    assert (out["count"], out["completed"], out["failed"]) == (7, 7, 0)
    assert [it["output"]["name"] for it in out["iterations"]] == [f"r{i}" for i in range(7)]
    assert out["iterations"][3] == {"index": 3, "item": {"name": "r3"}, "status": "completed",
                                    "output": {"name": "r3", "i": 3}}  # fmt: skip


async def test_for_each_limits_and_failures() -> None:
    calls = {"n": 0}

    async def sometimes(args: dict[str, Any]) -> dict[str, Any]:
        calls["n"] += 1
        if args["v"] == 2:
            raise StepFailed("bad item")
        return {"structuredContent": {"v": args["v"]}}

    def each(**extra: Any) -> WorkflowPlan:
        return plan_of([{"id": "e", "type": "forEach", "collection": "{{.params.items}}",
                         "step": {"tool": "t", "arguments": {"v": "{{.forEach.item}}"}},
                         **extra}])  # fmt: skip

    backend = Backend(t=sometimes)
    out = structured(await run_workflow(each(onError={"action": "continue"}),
                                        {"items": [1, 2, 3]}, backend.ports()))  # fmt: skip
    assert (out["completed"], out["failed"]) == (2, 1)
    assert out["iterations"][1]["error"] == "bad item"
    message = error_text(await run_workflow(each(maxParallel=1), {"items": [1, 2, 3]},
                                            backend.ports()))  # fmt: skip
    assert "step 'e' (forEach): iteration 1: bad item" in message
    message = error_text(await run_workflow(each(maxIterations=2), {"items": [1, 2, 3]},
                                            backend.ports()))  # fmt: skip
    assert "collection size 3 exceeds maxIterations 2" in message
    message = error_text(await run_workflow(each(), {"items": "not a list"}, backend.ports()))
    assert "collection must resolve to a JSON array" in message


# --- output and arguments


async def test_declared_output_is_built_with_types_and_defaults() -> None:
    backend = Backend(
        pr={"content": [{"type": "text", "text": json.dumps(
            {"title": "Fix", "number": 7, "user": {"login": "octo"}, "draft": False})}]},
        tags={"structuredContent": {"tags": ["v1", "v2"], "count": "2"}},
    )  # fmt: skip
    plan = plan_of(
        [{"id": "pr", "tool": "pr"}, {"id": "tags", "tool": "tags"}],
        output={
            "properties": {
                "title": {"type": "string", "value": "{{(fromJson .steps.pr.output.text).title}}"},
                "number": {"type": "integer",
                           "value": "{{(fromJson .steps.pr.output.text).number}}"},
                "count": {"type": "integer", "value": "{{.steps.tags.output.count}}"},
                "draft": {"type": "boolean", "value": "{{(fromJson .steps.pr.output.text).draft}}"},
                "tags": {"type": "array", "value": "{{json .steps.tags.output.tags}}"},
                "missing": {"type": "string", "value": "{{.steps.tags.output.nope}}",
                            "default": "n/a"},
                "broken": {"type": "number", "value": "{{.steps.tags.output.tags}}",
                           "default": "1.5"},
                "author": {"type": "object", "properties": {
                    "login": {"type": "string",
                              "value": "{{(fromJson .steps.pr.output.text).user.login}}"}}},
                "label": {"type": "string", "value": "PR #{{.params.n}}"},
                "absent": {"type": "string", "value": "{{.params.none}}"},
            },
            "required": ["title", "number"],
        },
    )  # fmt: skip
    out = structured(await run_workflow(plan, {"n": 7}, backend.ports()))
    assert out == {"title": "Fix", "number": 7, "count": 2, "draft": False, "tags": ["v1", "v2"],
                   "missing": "n/a", "broken": 1.5, "author": {"login": "octo"},
                   "label": "PR #7"}  # fmt: skip
    assert plan.output is not None
    assert plan.output.json_schema()["properties"]["author"]["properties"] == {
        "login": {"type": "string"}
    }


async def test_a_missing_required_output_is_an_error() -> None:
    plan = plan_of([{"id": "a", "tool": "t"}], output={
        "properties": {"x": {"type": "string", "value": "{{.steps.a.output.nope}}"}},
        "required": ["x"]})  # fmt: skip
    message = error_text(await run_workflow(plan, {}, Backend(t={"structuredContent": {}}).ports()))
    assert "output construction failed: required output field 'x' is missing" in message


async def test_arguments_are_checked_against_parameters() -> None:
    plan = plan_of([{"id": "a", "tool": "t"}], parameters={
        "type": "object", "required": ["repo"],
        "properties": {"repo": {"type": "string"}, "n": {"type": "integer"}}})  # fmt: skip
    ports = Backend(t={}).ports()
    assert error_text(await run_workflow(plan, {}, ports)) == (
        "Invalid arguments: parameter 'repo' is required"
    )
    assert "parameter 'n' must be of type integer" in error_text(
        await run_workflow(plan, {"repo": "r", "n": "5"}, ports)
    )
    assert "arguments must be an object" in error_text(await run_workflow(plan, [1], ports))


async def test_oversized_step_output_is_refused() -> None:
    huge = {"structuredContent": {"blob": "x" * (10 * 1024 * 1024 + 1)}}
    message = error_text(await run_workflow(plan_of([{"id": "a", "tool": "t"}]), {},
                                            Backend(t=huge).ports()))  # fmt: skip
    assert "step output too large" in message


# --- the builder


def problems_of(raw: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(PlanError) as info:
        build_plan(raw, "spec")
    return dict(info.value.problems)


def test_builder_reports_every_problem_with_its_field_path() -> None:
    problems = problems_of({
        "name": "wf", "timeout": "1d",
        "parameters": {"type": "string"},
        "steps": [
            {"id": "a", "tool": "t", "dependsOn": ["ghost"], "timeout": "soon"},
            {"id": "a", "tool": "t"},
            {"id": "b"},
            {"id": "c", "tool": "t", "arguments": {"x": {"y": ["{{if .p}}"]}}},
            {"id": "d", "tool": "bad name!", "condition": "{{nope .x}}"},
            {"id": "e", "type": "elicitation", "onDecline": {"action": "explode"}},
            {"id": "f", "tool": "t", "onError": {"action": "retry"}},
            {"id": "g", "type": "forEach", "itemVar": "index", "maxParallel": 99,
             "step": {"type": "elicitation", "message": "x"}},
            {"id": "h", "type": "wait"},
        ],
        "output": {"properties": {"o": {"type": "integer"}}, "required": ["zzz"]},
    })  # fmt: skip
    assert set(problems) == {
        "spec.description", "spec.timeout", "spec.parameters.type",
        "spec.steps[0].dependsOn[0]", "spec.steps[0].timeout", "spec.steps[1].id",
        "spec.steps[2].tool", "spec.steps[3].arguments.x.y[0]", "spec.steps[4].tool",
        "spec.steps[4].condition", "spec.steps[5].message", "spec.steps[5].onDecline.action",
        "spec.steps[6].onError.retryCount", "spec.steps[7].collection", "spec.steps[7].itemVar",
        "spec.steps[7].maxParallel", "spec.steps[7].step.type", "spec.steps[8].type",
        "spec.output.properties.o.value", "spec.output.required[0]",
    }  # fmt: skip
    assert "Go durations have no days" in problems["spec.timeout"]
    assert problems["spec.steps[3].arguments.x.y[0]"].startswith("invalid template: line 1")
    assert "function 'nope' not defined" in problems["spec.steps[4].condition"]


def test_builder_reports_template_mistakes_found_by_fuzzing() -> None:
    """A variable that is not declared (a typo of a field) and blocks nested past what can be
    compiled are problems of the manifest, reported at load: the first used to load and then
    hand the tool an argument that is no JSON value, the second to fail the load with a
    SyntaxError instead of a report."""
    problems = problems_of({"name": "wf", "description": "d", "steps": [
        {"id": "a", "tool": "t", "arguments": {"repo": "{{$repo}}"}},
        {"id": "b", "tool": "t", "condition": "{{range 1}}" * 25 + "{{end}}" * 25},
    ]})  # fmt: skip
    assert 'undefined variable "$repo"' in problems["spec.steps[0].arguments.repo"]
    assert "nested too deeply" in problems["spec.steps[1].condition"]


def test_builder_detects_cycles_and_missing_defaults() -> None:
    cycle = problems_of({"name": "wf", "description": "d", "steps": [
        {"id": "a", "tool": "t", "dependsOn": ["c"]},
        {"id": "b", "tool": "t", "dependsOn": ["a"]},
        {"id": "c", "tool": "t", "dependsOn": ["b"]},
    ]})  # fmt: skip
    assert list(cycle.values()) == ["dependency cycle: a -> c -> b -> a"]
    defaults = problems_of({"name": "wf", "description": "d", "steps": [
        {"id": "a", "tool": "t", "condition": "{{.params.go}}"},
        {"id": "b", "tool": "t", "dependsOn": ["a"], "arguments": {"x": "{{.steps.a.output.v}}"}},
    ]})  # fmt: skip
    assert "spec.steps[0].defaultResults.v" in defaults


def test_builder_defaults_and_pruned_fields() -> None:
    plan = build_plan({"name": "wf", "description": "d", "failureMode": "abort", "steps": [
        {"id": "a", "tool": "t", "onError": {"action": "retry", "retryCount": 50,
                                             "retryPolicy": {}}}]})  # fmt: skip
    step = plan.steps[0]
    assert (plan.timeout, step.timeout, step.on_error.retry_count, step.on_error.retry_delay) == (
        1800.0,
        300.0,
        10,
        1.0,
    )
    assert [path for path, _ in plan.warnings] == ["failureMode", "steps[0].onError.retryPolicy"]
    legacy = build_plan(
        {
            "name": "wf",
            "description": "d",
            "steps": [{"id": "a", "tool": "t"}],
            "parameters": {"env": {"type": "string", "required": True}},
        }
    )
    assert legacy.input_schema() == {"type": "object", "required": ["env"],
                                     "properties": {"env": {"type": "string"}}}  # fmt: skip


async def test_max_retries_is_retry_count_under_its_v0_6_name(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ToolHive v0.6's ``onError: {action: retry, maxRetries: 2, retryDelay: 30s}``: two
    retries after the first attempt, 30 s then 45 s apart, as ``retryCount: 2`` would be."""
    on_error = {"action": "retry", "maxRetries": 2, "retryDelay": "30s"}
    plan = plan_of([{"id": "f", "tool": "flaky", "onError": on_error}])
    assert (plan.steps[0].on_error.retry_count, plan.steps[0].on_error.retry_delay) == (2, 30.0)
    assert plan.warnings == ()
    backend = Backend(flaky=failing(99))
    start = trio.current_time()
    assert "backend down" in error_text(await run_workflow(plan, {}, backend.ports()))
    assert len(backend.calls) == 3
    assert trio.current_time() - start == pytest.approx(30.0 + 45.0)
    recovering = Backend(flaky=failing(2))
    assert structured(await run_workflow(plan, {}, recovering.ports())) == {"attempt": 3}
    both = problems_of({"name": "wf", "description": "d", "steps": [
        {"id": "f", "tool": "t", "onError": {**on_error, "retryCount": 3}}]})  # fmt: skip
    assert "differs from retryCount" in both["spec.steps[0].onError.maxRetries"]


# --- every composite tool of the collected ToolHive manifests

# Definitions that ToolHive rejects too: documentation skeletons, negative tests, and a guide
# without a description.
KNOWN_BAD = {
    ("docs-website-v1alpha1/guides-vmcp-composite-tools-01.yaml", "my_workflow"): "skeleton",
    ("docs-website/guides-vmcp-composite-tools-01.yaml", "my_workflow"): "skeleton",
    ("docs-website/reference-crds-virtualmcpcompositetooldefinition-01-"
     "virtualmcpcompositetooldefinition.yaml", "<string>"): "skeleton",
    ("toolhive-docs/operator-virtualmcpcompositetooldefinition-guide-01.yaml",
     "deploy_app"): "skeleton",
    ("toolhive-chainsaw/vmcp.extracted.yaml", "invalid_duplicate"): "negative test",
    ("toolhive-chainsaw/vmcp.extracted.yaml", "circular_workflow"): "negative test",
    ("toolhive-docs/operator-advanced-workflow-patterns-02.yaml", None): "no description",
}  # fmt: skip


def composite_definitions() -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for path in sorted(TOOLHIVE_MANIFESTS.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict):
                continue
            spec = doc.get("spec") or {}
            rel = str(path.relative_to(TOOLHIVE_MANIFESTS))
            if doc.get("kind") == "VirtualMCPCompositeToolDefinition":
                found.append((rel, "spec", spec))
            if doc.get("kind") == "VirtualMCPServer":
                for base, where in ((spec, "spec"), (spec.get("config") or {}, "spec.config")):
                    for i, tool in enumerate(base.get("compositeTools") or []):
                        found.append((rel, f"{where}.compositeTools[{i}]", tool))
    return found


def test_every_toolhive_composite_tool_builds() -> None:
    definitions = composite_definitions()
    assert len(definitions) >= 30
    built, rejected = 0, set()
    for rel, where, raw in definitions:
        try:
            build_plan(raw, where)
            built += 1
        except PlanError as exc:
            key = (rel, raw.get("name")) if (rel, raw.get("name")) in KNOWN_BAD else (rel, None)
            assert key in KNOWN_BAD, f"{rel} {where}: {exc}"
            rejected.add(key)
    assert rejected == set(KNOWN_BAD)
    assert built == len(definitions) - len(KNOWN_BAD)
