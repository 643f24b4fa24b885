"""What an MCP request asks of the authorization policies: the Cedar checks it needs.

One job: map a JSON-RPC request (method and params, under the names the client sees) to the
:class:`~.cedar.CedarCheck` s that must all allow it, as ToolHive's vMCP does
(``pkg/authz/middleware.go``, ``pkg/authz/derived_authz.go``, ``pkg/vmcp/server/call_gate.go``):

* ``tools/call`` -> ``call_tool`` on ``Tool::"<name>"`` (with the tool's annotation hints and the
  call's arguments); ``prompts/get`` -> ``get_prompt`` on ``Prompt::"<name>"``;
  ``resources/read``, ``resources/subscribe`` and ``resources/unsubscribe`` ->
  ``read_resource`` on the resource, and so are a skill's (``skills/get``; a skill listed is
  one its SKILL.md may be read) and a skill directory's (``resources/directory/read``);
  ``completion/complete`` -> the prompt or resource its ``ref`` names;
  ``subscriptions/listen`` (2026-07-28) -> one ``read_resource`` per URI it subscribes to.
* A request it cannot place (a ``completion/complete`` without a known ``ref``) needs a check no
  policy can pass: it is denied.
* Every other method is not checked: the lifecycle (``initialize``, ``ping``,
  ``server/discover``, ``logging/setLevel``, notifications), the lists (their items are
  filtered, each with the check its use would need: :func:`item_check`), and the Tasks methods
  (a task id reaches only the caller's own tasks, started by calls that were allowed). A
  method the gateway does not serve is answered "method not found" as without policies.

A denial names the kind of thing denied, never the thing (``call denied by authorization
policy``), and a tool that does not exist is denied like one that does (default deny), so that
a denial tells a caller nothing about what exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from .cedar import CedarCheck, resource_id_for_uri

__all__ = ["DENIED", "DENY_ALWAYS", "NO_ANNOTATIONS", "checks_for", "denial_message",
           "item_check"]

DENIED = 403
"""The JSON-RPC code of a denial (ToolHive's ``JSONRPCCodeDenied``; the HTTP status too)."""
MAX_LISTEN_URIS = 50
DENY_ALWAYS = CedarCheck("vmcp:unplaceable", "vmcp:Nothing", "")
"""A check no policy can sensibly allow: the request could not be placed."""

Annotations = Callable[[str], Mapping[str, Any]]
"""A tool's annotation hints by the name the client sees (:data:`NO_ANNOTATIONS` for an
unknown tool or one without)."""
NO_ANNOTATIONS: Mapping[str, Any] = MappingProxyType({})
MAX_TOOL_CHECKS = 4096
_tool_checks: dict[tuple[str, int], tuple[Mapping[str, Any], CedarCheck]] = {}
"""Tool checks by name and annotations object (kept here, so that its id stays its own)."""

_MESSAGES = {"call_tool": "call denied by authorization policy",
             "get_prompt": "prompt denied by authorization policy",
             "read_resource": "read denied by authorization policy"}


def _hints(annotations: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in annotations.items()
            if key.endswith("Hint") and isinstance(value, bool)}


def tool_check(name: str, arguments: Any, annotations: Mapping[str, Any]) -> CedarCheck:
    """The check of a call of tool ``name`` (made once per tool and annotations object, then
    reused with each call's arguments: building it cost more than the cached decision)."""
    known = _tool_checks.get((name, id(annotations)))
    if known is not None and known[0] is annotations:
        bare = known[1]
    else:
        bare = CedarCheck("call_tool", "Tool", name,
                          {**_hints(annotations), "name": name, "operation": "call",
                           "feature": "tool"})
        if len(_tool_checks) >= MAX_TOOL_CHECKS:
            _tool_checks.clear()
        _tool_checks[(name, id(annotations))] = (annotations, bare)
    if not isinstance(arguments, dict):
        return bare
    return CedarCheck(bare.action, bare.resource_type, bare.resource_id, bare.attributes,
                      arguments, bare.key)


def prompt_check(name: str, arguments: Any = None) -> CedarCheck:
    return CedarCheck("get_prompt", "Prompt", name,
                      {"name": name, "operation": "get", "feature": "prompt"},
                      arguments if isinstance(arguments, dict) else None)


def resource_check(uri: str) -> CedarCheck:
    return CedarCheck("read_resource", "Resource", resource_id_for_uri(uri),
                      {"name": uri, "uri": uri, "operation": "read", "feature": "resource"})


def checks_for(method: str, params: Mapping[str, Any],
               annotations: Annotations) -> list[CedarCheck]:
    """The checks ``method`` with ``params`` needs (none: not checked)."""
    if method == "tools/call":
        name = params.get("name")
        return [tool_check(name, params.get("arguments"), annotations(name))
                if isinstance(name, str) else DENY_ALWAYS]
    if method == "prompts/get":
        name = params.get("name")
        return [prompt_check(name, params.get("arguments")) if isinstance(name, str)
                else DENY_ALWAYS]
    if method in ("resources/read", "resources/subscribe", "resources/unsubscribe",
                  "skills/get", "resources/directory/read"):
        uri = params.get("uri")
        return [resource_check(uri) if isinstance(uri, str) else DENY_ALWAYS]
    if method == "completion/complete":
        ref = params.get("ref")
        ref = ref if isinstance(ref, dict) else {}
        if ref.get("type") == "ref/prompt" and isinstance(ref.get("name"), str):
            return [prompt_check(ref["name"])]
        if ref.get("type") == "ref/resource" and isinstance(ref.get("uri"), str):
            return [resource_check(ref["uri"])]
        return [DENY_ALWAYS]
    if method == "subscriptions/listen":
        wanted = params.get("notifications")
        uris = wanted.get("resourceSubscriptions") if isinstance(wanted, dict) else None
        if not isinstance(uris, list):
            return []
        if len(uris) > MAX_LISTEN_URIS or not all(isinstance(uri, str) for uri in uris):
            return [DENY_ALWAYS]
        return [resource_check(uri) for uri in dict.fromkeys(uris)]
    return []


def item_check(list_method: str, item: Mapping[str, Any]) -> CedarCheck:
    """The check a listed item is shown under: the one using it would need."""
    if list_method == "tools/list":
        annotations = item.get("annotations")
        return tool_check(str(item.get("name")), None,
                          annotations if isinstance(annotations, dict) else {})
    if list_method == "prompts/list":
        return prompt_check(str(item.get("name")))
    if list_method == "resources/templates/list":
        return resource_check(str(item.get("uriTemplate")))
    return resource_check(str(item.get("uri")))


def denial_message(check: CedarCheck) -> str:
    return _MESSAGES.get(check.action, "request denied by authorization policy")
