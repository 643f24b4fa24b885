"""The Tasks extension's wire rules (``io.modelcontextprotocol/tasks``, SEP-2663), with no I/O.

A server that supports the extension declares it under ``capabilities.extensions``; a client
declares it the same way (in ``initialize``, or per request in the 2026-07-28 ``_meta`` client
capabilities). Only then may a ``tools/call`` answer with a ``CreateTaskResult`` (a flat result
with ``resultType: "task"`` and a ``taskId``), and only then may the client call ``tasks/get``,
``tasks/update`` and ``tasks/cancel`` (each names its task in ``params.taskId``, mirrored in the
``Mcp-Name`` header); without the declaration those answer -32021 (Missing Required Client
Capability) with ``data.requiredCapabilities``. Servers announce state changes with
``notifications/tasks`` (``params.taskId``, ``status`` and the rest of the task) on a
``subscriptions/listen`` stream whose filter names the task under ``taskIds``.

What a gateway does with these (which id the client sees, which backend a task method goes to)
is :mod:`vmcp_trio.gateway.task_ids`; this module only says what the messages are.
"""

from __future__ import annotations

from typing import Any

__all__ = ["STATUS_NOTIFICATION", "TASKS_EXTENSION", "TASK_METHODS", "WATCH_FILTER",
           "capabilities_for_backend", "declares_tasks", "is_task_result",
           "required_capability_data", "with_tasks_declared"]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
"""The extension's request methods; each names its task in ``params.taskId``."""
STATUS_NOTIFICATION = "notifications/tasks"
WATCH_FILTER = "taskIds"
"""The ``subscriptions/listen`` filter key naming the tasks whose status notifications a client
wants (only a client that declared the extension may set it)."""


def declares_tasks(capabilities: object) -> bool:
    """Whether client or server ``capabilities`` declare the Tasks extension."""
    if not isinstance(capabilities, dict):
        return False
    extensions = capabilities.get("extensions")
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def capabilities_for_backend(capabilities: dict[str, Any],
                             backend_capabilities: dict[str, Any] | None) -> dict[str, Any]:
    """A client's capabilities as a backend may see them: its Tasks declaration only for a
    backend that declares the extension itself (``None``: not known yet, so not). Unchanged
    (the same object) when there is nothing to take out."""
    if not declares_tasks(capabilities) or declares_tasks(backend_capabilities):
        return capabilities
    extensions = {k: v for k, v in capabilities["extensions"].items() if k != TASKS_EXTENSION}
    trimmed = {k: v for k, v in capabilities.items() if k != "extensions"}
    if extensions:
        trimmed["extensions"] = extensions
    return trimmed


def with_tasks_declared(capabilities: dict[str, Any]) -> dict[str, Any]:
    """``capabilities`` with the Tasks extension declared."""
    extensions = capabilities.get("extensions")
    return {**capabilities, "extensions": {**(extensions if isinstance(extensions, dict)
                                              else {}), TASKS_EXTENSION: {}}}


def is_task_result(result: dict[str, Any]) -> bool:
    """Whether a ``tools/call`` result is a ``CreateTaskResult``."""
    return result.get("resultType") == "task" and isinstance(result.get("taskId"), str)


def required_capability_data() -> dict[str, Any]:
    """The ``data`` of the -32021 error a task method gets from a client without the
    declaration."""
    return {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
