"""The client side of protocol 2026-07-28 for a caller that speaks a handshake revision, with
no I/O: the one home of what the gateway's stateless backend link and the stdio proxy's
dual-era bridge both do.

A handshake client knows a session: ``initialize``, server-to-client requests in the middle of
a call, ``resources/subscribe``, list changes on a GET stream. A 2026-07-28 server has none of
them. Whoever stands between the two keeps these rules:

* **Discovery** (:func:`discovered`): a ``server/discover`` result names 2026-07-28 among its
  ``supportedVersions`` or the server is not one (the caller falls back to the handshake); its
  capabilities, ``_meta`` server info and instructions are what a handshake client is told in
  its ``initialize`` answer (:func:`initialize_result`, at the revision the client asked for
  when it is a handshake one, else the latest handshake revision).
* **Input rounds** (:class:`InputRounds`): an ``InputRequiredResult`` (``resultType``
  ``input_required``) carries at most :data:`MAX_INPUT_REQUESTS` ``inputRequests``, each an
  embedded request with a string ``method``; anything else is a broken server. Each is put to
  the client as an ordinary server-to-client request, and only if the client declared the
  capability it needs (:func:`unaskable`: sampling, elicitation (its ``url`` mode needs
  ``elicitation.url``), roots; any other method cannot be put to a handshake client). The call
  is retried with the answers as ``inputResponses`` and the server's ``requestState`` echoed
  unchanged (the same string, never re-encoded by us), or without one when the server sent
  none; at most :data:`MAX_ROUNDS` rounds.
* **Headers from schemas** (:class:`ToolSchemas`): a ``tools/call`` mirrors the arguments its
  tool's input schema marks ``x-mcp-header`` in ``Mcp-Param-*`` headers, so the schemas seen in
  ``tools/list`` answers are kept (at most :data:`MAX_KNOWN_TOOLS`).
* **The listen stream** (:func:`listen_filter`, :func:`acknowledged`, :func:`listened`): one
  ``subscriptions/listen`` asks for the list changes the server declares (``listChanged``), the
  subscribed resource URIs and the watched tasks; the server's
  ``notifications/subscriptions/acknowledged`` says which it honours; each notification it
  delivers reaches the client without the stream's ``subscriptionId`` in its ``_meta``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .revisions import STATELESS, negotiate
from .stateless_requests import SERVER_INFO, SUBSCRIPTION_ID
from .tasks_extension import WATCH_FILTER

__all__ = ["CLIENT_CAPABILITY", "MAX_INPUT_REQUESTS", "MAX_KNOWN_TOOLS", "MAX_ROUNDS",
           "Discovered", "InputRounds", "ToolSchemas", "acknowledged", "discovered",
           "initialize_result", "listen_filter", "listened", "unaskable"]

MAX_ROUNDS = 10
"""Input-required rounds of one call answered for a handshake client (the SDKs' default)."""
MAX_INPUT_REQUESTS = 16
"""Input requests in one ``InputRequiredResult``."""
MAX_KNOWN_TOOLS = 10_000
"""Tool schemas kept for ``Mcp-Param-*`` headers."""
CLIENT_CAPABILITY = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation",
                     "roots/list": "roots"}
"""What each request to the client needs the client to have declared."""
_LIST_FILTERS = (("tools", "toolsListChanged"), ("prompts", "promptsListChanged"),
                 ("resources", "resourcesListChanged"))


@dataclass(frozen=True)
class Discovered:
    """What a 2026-07-28 server said of itself in ``server/discover``."""

    capabilities: dict[str, Any]
    server_info: dict[str, Any]
    instructions: str | None


def discovered(result: object) -> Discovered | None:
    """A ``server/discover`` result, or None when it is not that of a 2026-07-28 server."""
    if not isinstance(result, dict):
        return None
    versions = result.get("supportedVersions")
    if not isinstance(versions, list) or STATELESS.version not in versions:
        return None
    capabilities, meta = result.get("capabilities"), result.get("_meta")
    info = meta.get(SERVER_INFO) if isinstance(meta, dict) else None
    instructions = result.get("instructions")
    return Discovered(capabilities if isinstance(capabilities, dict) else {},
                      info if isinstance(info, dict) else {},
                      instructions if isinstance(instructions, str) else None)


def initialize_result(server: Discovered, requested_version: object) -> dict[str, Any]:
    """The ``initialize`` answer a handshake client gets for a 2026-07-28 ``server``."""
    result: dict[str, Any] = {"protocolVersion": negotiate(requested_version).version,
                              "capabilities": server.capabilities,
                              "serverInfo": server.server_info or {"name": "unknown",
                                                                   "version": "0"}}
    if server.instructions is not None:
        result["instructions"] = server.instructions
    return result


def unaskable(request: Mapping[str, Any], capabilities: Mapping[str, Any]) -> str | None:
    """Why an input request cannot be put to a handshake client with ``capabilities`` (None:
    it can)."""
    method = request.get("method")
    needed = CLIENT_CAPABILITY.get(method) if isinstance(method, str) else None
    if needed is None:
        return f"{str(method)[:60]} has no handshake-era request to put to the client"
    declared = capabilities.get(needed)
    if not isinstance(declared, dict):
        return f"the client did not declare the {needed} capability"
    params = request.get("params")
    if needed == "elicitation" and isinstance(params, dict) and params.get("mode") == "url" \
            and not isinstance(declared.get("url"), dict):
        return "the client did not declare URL-mode elicitation"
    return None


class InputRounds:
    """One call's input-required rounds: which input requests to put to the client, and the
    params to retry with."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        """What the next round sends."""
        self.rounds = 0

    @staticmethod
    def wanted(result: Mapping[str, Any]) -> bool:
        """Whether ``result`` asks for input (else it is the call's result)."""
        return result.get("resultType") == "input_required"

    def requests(self, result: Mapping[str, Any]) -> dict[str, dict[str, Any]] | str:
        """The input requests of an ``InputRequiredResult``, by key; or why there are none to
        ask (too many rounds, a malformed result)."""
        self.rounds += 1
        if self.rounds > MAX_ROUNDS:
            return f"asked for client input more than {MAX_ROUNDS} times in one call"
        requests = result.get("inputRequests")
        if not requests and isinstance(result.get("requestState"), str):
            return {}  # state alone: retry at once
        if (not isinstance(requests, dict) or not requests
                or len(requests) > MAX_INPUT_REQUESTS
                or not all(isinstance(r, dict) and isinstance(r.get("method"), str)
                           for r in requests.values())):
            return "sent an InputRequiredResult without valid inputRequests"
        return {str(key): request for key, request in requests.items()}

    def answered(self, result: Mapping[str, Any], answers: dict[str, Any]) -> dict[str, Any]:
        """The params of the next round: the client's ``answers`` (results by key) and the
        server's ``requestState`` as it came."""
        params = {k: v for k, v in self.params.items()
                  if k not in ("inputResponses", "requestState")}
        if answers:
            params["inputResponses"] = answers
        state = result.get("requestState")
        if isinstance(state, str):
            params["requestState"] = state
        self.params = params
        return params


class ToolSchemas:
    """The input schema of each tool a server listed (they say which arguments of a
    ``tools/call`` travel in headers)."""

    def __init__(self) -> None:
        self._schemas: dict[str, object] = {}

    def learn(self, method: str, result: Mapping[str, Any]) -> None:
        """Remember the schemas of a ``tools/list`` result (any other result: nothing)."""
        tools = result.get("tools") if method == "tools/list" else None
        if not isinstance(tools, list):
            return
        for tool in tools:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                if len(self._schemas) >= MAX_KNOWN_TOOLS and tool["name"] not in self._schemas:
                    break
                self._schemas[tool["name"]] = tool.get("inputSchema")

    def of(self, method: str, params: Mapping[str, Any]) -> object:
        """The schema of the tool a ``tools/call`` names (None: unknown, or another method)."""
        return self._schemas.get(str(params.get("name"))) if method == "tools/call" else None


def listen_filter(server_capabilities: Mapping[str, Any], uris: Collection[str],
                  task_ids: Collection[str] = ()) -> dict[str, Any]:
    """What a listen stream asks for: the list changes the server declares, the subscribed
    resources and the watched tasks (empty: nothing to listen for)."""
    wanted: dict[str, Any] = {}
    for capability, key in _LIST_FILTERS:
        declared = server_capabilities.get(capability)
        if isinstance(declared, dict) and declared.get("listChanged"):
            wanted[key] = True
    if uris:
        wanted["resourceSubscriptions"] = sorted(uris)
    if task_ids:
        wanted[WATCH_FILTER] = sorted(task_ids)
    return wanted


def acknowledged(params: Mapping[str, Any], key: str) -> frozenset[str]:
    """The strings an acknowledgement's honoured filter lists under ``key``."""
    honored = params.get("notifications")
    listed = honored.get(key) if isinstance(honored, dict) else None
    return frozenset(item for item in listed if isinstance(item, str)) \
        if isinstance(listed, list) else frozenset()


def listened(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A listen stream notification's params as the client gets them (without the stream's
    ``subscriptionId``)."""
    if not params:
        return None
    given = dict(params)
    meta = given.get("_meta")
    if isinstance(meta, dict) and SUBSCRIPTION_ID in meta:
        rest = {k: v for k, v in meta.items() if k != SUBSCRIPTION_ID}
        if rest:
            given["_meta"] = rest
        else:
            del given["_meta"]
    return given or None
