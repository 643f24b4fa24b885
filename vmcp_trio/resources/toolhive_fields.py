"""ToolHive's fields that vmcp accepts without acting on them, set aside before the models run.

One job: take out of a spec the fields of ToolHive's CRDs that mean nothing to vmcp (yet), and
say so, so that the strict models see only what vmcp acts on. Each field belongs to one family,
with its own rule:

* ``kubernetes-only``: one warning per resource, listing them. Fields that shape only the
  workload ToolHive's operator creates (``toolhive/FIELDS.md``'s "k8s" column: image, resources,
  ports, replicas, pod template, Service settings, service account, volumes, image pull secrets),
  and for an MCPServer the settings of the container and of ToolHive's proxy in front of it
  (``secrets`` as container variables, the proxy's own incoming auth: ``oidcConfigRef``,
  ``oidcConfig``, ``authServerRef``; session storage and path prefix), and for an
  MCPRemoteProxy those of its proxy pod (vmcp connects to ``remoteUrl`` directly). vmcp runs no
  pod or proxy: who may reach a backend is the gateway's ``incomingAuth``'s decision. For an
  MCPServer reached at its in-cluster URL (neither ``url`` nor ``command``) they are not
  ignored but the operator's business, and pass without a word.
* ``ignored-field``: a warning per field. Features vmcp does not have whose absence changes no
  security decision and no result a client gets: telemetry (vmcp serves ``/metrics``; its
  traces follow the process's ``OTEL_*`` environment), an MCPRemoteProxy's own incoming auth
  (its pod's, which vmcp does not run), the optimizer and its embedding server, code mode, the
  runtime config's ``name``/``metadata``, ``logLevel`` and status reporting; and the runtime
  form of incoming and outgoing auth (``config.incomingAuth``, ``config.outgoingAuth``), which
  ToolHive's operator always replaces with ``spec``'s. A value that turns nothing on
  (``false``, or a block with ``enabled: false``) passes without a word.

An MCPServer reached at its in-cluster URL is reached through ToolHive's proxy, which enforces
the proxy's own features (authorization, rate limiting, tool filters, audit, webhooks): there
they pass as the operator's business. A server vmcp reaches directly (``url``) or starts
(``command``) has no such proxy: vmcp applies those itself (:data:`PROXY_APPLIED`, in the
models).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

from .problems import PathPart
from .report import Report, Resource

__all__ = ["accepted_patterns", "set_aside", "split_pattern"]

Rule = tuple[str, str]
"""(field pattern, what it is): dots between keys, ``[]`` for every list item, ``*`` for every
map key."""


def _both(pattern: str, what: str) -> tuple[Rule, Rule]:
    """A gateway setting ToolHive has under ``spec.config`` and (v0.6.x) directly under ``spec``."""
    return (pattern, what), (f"config.{pattern}", what)


KUBERNETES_ONLY: dict[str, tuple[str, ...]] = {
    "MCPServer": ("image", "mcpPort", "targetPort", "permissionProfile", "podTemplateSpec",
                  "replicas", "backendReplicas", "resourceOverrides", "resources",
                  "serviceAccount", "sessionAffinity", "volumes", "secrets", "endpointPrefix",
                  "trustProxyHeaders", "sessionStorage", "oidcConfigRef", "oidcConfig",
                  "authServerRef"),
    "VirtualMCPServer": ("imagePullSecrets", "podTemplateSpec", "replicas", "serviceAccount",
                         "serviceType", "sessionAffinity"),
    "MCPRemoteProxy": ("podTemplateSpec", "proxyPort", "port", "replicas", "resourceOverrides",
                       "resources", "serviceAccount", "sessionAffinity", "sessionStorage",
                       "endpointPrefix", "trustProxyHeaders"),
}

_TELEMETRY = ("telemetry (vmcp serves /metrics, and its traces follow the process's OTEL_* "
              "environment)")
_PROXY_INCOMING = ("the incoming auth of ToolHive's proxy pod, which vmcp does not run: it "
                   "connects to remoteUrl directly, and the VirtualMCPServer's incomingAuth "
                   "decides who gets in")

IGNORED: dict[str, tuple[Rule, ...]] = {
    "MCPServer": (("telemetry", _TELEMETRY), ("telemetryConfigRef", _TELEMETRY)),
    "VirtualMCPServer": (
        *_both("telemetry", _TELEMETRY),
        ("embeddingServerRef", "the optimizer is not implemented yet"),
        ("config.optimizer", "the optimizer is not implemented yet"),
        ("config.codeMode", "code mode is not implemented yet"),
        ("config.name", "the gateway's name is metadata.name"),
        ("config.metadata", "the gateway's metadata is metadata"),
        *_both("operational.logLevel", "the log level is vmcp's --debug flag"),
        *_both("operational.failureHandling.statusReportingInterval",
               "status is reported to Kubernetes only"),
        ("config.incomingAuth", "ToolHive's operator always replaces it with spec.incomingAuth "
                                "(which is required), so it never takes effect: vmcp does the "
                                "same"),
        ("config.outgoingAuth", "ToolHive's operator always replaces it with spec.outgoingAuth "
                                "(default: source discovered), so it never takes effect: vmcp "
                                "does the same"),
    ),
    "MCPRemoteProxy": (
        ("oidcConfigRef", _PROXY_INCOMING),
        ("oidcConfig", _PROXY_INCOMING),
        ("authServerRef", _PROXY_INCOMING),
        ("audit", "the audit log of ToolHive's proxy pod, which vmcp does not run: the "
                  "gateway's own config.audit records the calls that reach this backend"),
        ("telemetry", _TELEMETRY),
        ("telemetryConfigRef", _TELEMETRY),
    ),
}


PROXY_APPLIED: dict[str, tuple[str, ...]] = {
    "MCPServer": ("authzConfig", "authzConfigRef", "rateLimiting", "tools", "audit",
                  "webhookConfigRef"),
}
"""Fields that ToolHive's proxy in front of a server enforces, and vmcp itself for a server it
reaches by ``url`` or starts by ``command`` (in the models); set aside for a server at its
in-cluster URL, whose proxy applies them."""

def split_pattern(pattern: str) -> list[str]:
    """``a.b[].c`` -> ``["a", "b", "[]", "c"]``."""
    return pattern.replace("[]", ".[]").split(".")


def accepted_patterns(kind: str) -> list[str]:
    """Every field pattern of ``kind`` that this module sets aside (for the CRDs)."""
    return [*KUBERNETES_ONLY.get(kind, ()),
            *dict.fromkeys(pattern for pattern, _ in IGNORED.get(kind, ()))]


def _take(node: Any, parts: Sequence[str],
          at: tuple[PathPart, ...]) -> Iterator[tuple[tuple[PathPart, ...], Any]]:
    """Remove from ``node`` every value the pattern ``parts`` matches: (its path, the value)."""
    head, rest = parts[0], parts[1:]
    if head == "[]":
        if isinstance(node, list):
            for index, item in enumerate(node):
                yield from _take(item, rest, (*at, index))
        return
    if not isinstance(node, dict):
        return
    keys = [k for k in node if isinstance(k, str)] if head == "*" else [head] * (head in node)
    for key in keys:
        if rest:
            yield from _take(node[key], rest, (*at, key))
        else:
            yield (*at, key), node.pop(key)


def _inert(value: Any) -> bool:
    """A value that turns nothing on: ``false``, empty, or a block with ``enabled: false``."""
    if isinstance(value, dict) and value.get("enabled") is False:
        return True
    return value is False or value is None or value in ({}, [], "")


def set_aside(kind: str, spec: Any, report: Report, resource: Resource) -> Any:
    """``spec`` without the fields of this module's tables (a copy), each reported by its rule."""
    if not isinstance(spec, dict) or not any(kind in table for table in (KUBERNETES_ONLY,
                                                                          IGNORED)):
        return spec
    spec = copy.deepcopy(spec)
    proxied = kind == "MCPServer" and "url" not in spec and "command" not in spec
    k8s = [name for name in KUBERNETES_ONLY.get(kind, ()) if spec.pop(name, None) is not None]
    for pattern, what in IGNORED.get(kind, ()):
        for path, value in _take(spec, split_pattern(pattern), ("spec",)):
            if not _inert(value):
                report.warn(resource, path, "ignored-field", f"is ignored: {what}")
    if proxied:
        for name in PROXY_APPLIED.get(kind, ()):
            spec.pop(name, None)
    if k8s and not proxied:
        shape = {"MCPServer": "the workload and ToolHive's proxy in front of it that "
                              "ToolHive's operator runs",
                 "MCPRemoteProxy": "ToolHive's proxy pod, which vmcp does not run: it "
                                   "connects to remoteUrl directly"}.get(
            kind, "the workload that ToolHive's operator runs")
        report.warn(resource, ("spec",), "kubernetes-only",
                    f"{', '.join(k8s)}: ignored outside Kubernetes (they shape only {shape})")
    return spec
