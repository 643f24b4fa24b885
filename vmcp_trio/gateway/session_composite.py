"""A composite tool run for one call of a session: its steps as calls of their own.

Rules it keeps (:func:`run_composite`):

* Each step names a tool as clients see it, or as ``<backend>.<tool>`` (ToolHive's form); its
  arguments are coerced to the listed tool's input schema.
* Each step is refused, forwarded, audited and timed like a client's ``tools/call`` (the
  session's :class:`StepPorts`), with the caller's credentials; a step that fails ends the
  workflow with :class:`~vmcp_trio.composite.engine.StepFailed` naming it.
* Elicitation steps ask the call's client; progress is told per step when the client asked for
  it (a progress token); cancelling the call cancels every step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from ..composite.engine import StepFailed, WorkflowPorts, coerce_arguments, run_workflow
from ..protocol.jsonrpc import ErrorResponse, Notification, Request, Response, encode
from ..resources.composite_plan import WorkflowPlan
from .admission import Refusal
from .aggregation import Catalog, Route
from .backends.base import BackendError, BackendLink
from .calls import Call, progress_token
from .client_relay import QuestionRefused
from .session_links import SessionLinks

__all__ = ["StepPorts", "run_composite"]

Reply = Response | ErrorResponse


@dataclass(frozen=True, slots=True)
class StepPorts:
    """What a workflow's steps use of their session."""

    links: SessionLinks
    refuse: Callable[[Request], Awaitable[Refusal | None]]
    forward: Callable[[BackendLink, Request, dict[str, Any], Call], Awaitable[Reply]]
    audit: Callable[..., None]
    ask: Callable[[Call, str, dict[str, Any]], Awaitable[dict[str, Any]]]


async def run_composite(ports: StepPorts, catalog: Catalog, request: Request,
                        workflow: WorkflowPlan, params: dict[str, Any], call: Call) -> Response:
    """The composite tool's result (raises StepFailed)."""
    call.progress_token = progress_token(params)

    async def call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        route = _step_route(catalog, name, ports.links)
        listed = catalog.tool(name) or next(
            (tool for tool in catalog.tools
             if catalog.tool_routes.get(str(tool.get("name"))) == route), None)
        if listed is not None:
            arguments = coerce_arguments(arguments, listed.get("inputSchema"))
        step = Request(request.id, "tools/call", {"name": name, "arguments": arguments})
        refusal = await ports.refuse(step)
        if refusal is not None:
            raise StepFailed(f"tool {name[:100]!r}: {refusal.reply.error.message}")
        started = trio.current_time()
        try:
            reply = await ports.forward(ports.links.link(route.backend), step,
                                        {"name": route.name, "arguments": arguments},
                                        Call(call.stream, call.stateless, call.parked))
        except BackendError as exc:
            raise StepFailed(f"backend {exc.backend!r} {exc.detail}") from None
        ports.audit(step, reply, backend=route.backend, seconds=trio.current_time() - started)
        if isinstance(reply, ErrorResponse):
            raise StepFailed(reply.error.message[:500])
        return reply.result

    async def elicit(message: str, schema: dict[str, Any]) -> dict[str, Any]:
        try:
            return await ports.ask(call, "elicitation/create",
                                   {"message": message, "requestedSchema": schema})
        except QuestionRefused as exc:
            raise StepFailed(str(exc)) from None

    async def progress(done: int, total: int, message: str) -> None:
        if call.progress_token is not None:
            call.stream.push(encode(Notification("notifications/progress", {
                "progressToken": call.progress_token, "progress": done, "total": total,
                "message": message})))

    result = await run_workflow(workflow, params.get("arguments"),
                                WorkflowPorts(call_tool, elicit, progress))
    return Response(request.id, result)


def _step_route(catalog: Catalog, name: str, links: SessionLinks) -> Route:
    """The backend tool a composite tool's step names: as clients see it, or as
    ``<backend>.<tool>`` (ToolHive's form). Raises StepFailed."""
    route = catalog.tool_routes.get(name)
    backend, _, tool = name.partition(".")
    if route is None and tool and backend in links:
        route = Route(backend, tool)
    if route is None:
        raise StepFailed(f"no tool {name[:100]!r} (a step names a tool as clients see it, or "
                         "as <backend>.<tool>)")
    return route
