"""Remote backends (MCPServerEntry, MCPRemoteProxy) and tool configs (MCPToolConfig).

One job: turn these ToolHive kinds into what a gateway plan needs (an :class:`HttpEndpoint` with
its static headers; a :class:`WorkloadToolsPlan`), reporting each rule at its field.

* **MCPServerEntry** (ToolHive v0.16+) is a remote MCP server that vMCP reaches directly, with no
  pod: a URL backend at ``remoteUrl`` of the group ``groupRef`` names, over ``transport``.
* **MCPRemoteProxy** is, in ToolHive, a proxy *pod* in front of ``remoteUrl`` (vMCP reaches the
  pod). Outside Kubernetes there is no pod: vmcp connects to ``remoteUrl`` directly, and applies
  itself what the pod would on the way (``headerForward``, ``toolConfigRef``, its Cedar
  policies and its rate limits: :mod:`.policy_rules`, for the calls routed to it). The pod's
  own incoming side does not exist here: ``oidcConfigRef`` is ignored with a warning (the
  VirtualMCPServer's ``incomingAuth`` decides who gets in), and so is ``audit`` (the gateway's
  records the calls). ``remoteURL`` (up to v0.15) means ``remoteUrl``.
* Both: ``externalAuthConfigRef`` is the backend's own outgoing strategy, as an MCPServer's (the
  VirtualMCPServer's ``outgoingAuth`` decides whether it applies). ``headerForward`` adds static
  headers to every request to the backend: ``addPlaintextHeaders`` and ``addHeadersFromSecret``
  (resolved like every Secret reference, never logged). Refused: hop-by-hop and framing headers
  (``Connection``, ``Host``, ``Content-Length``...), ``X-Forwarded-*`` and ``Forwarded`` (as in
  ToolHive), the transport's own (``Accept``, ``Content-Type``, ``Last-Event-ID``, any
  ``Mcp-*`` such as ``Mcp-Session-Id`` and ``MCP-Protocol-Version``, trace context), a name
  given twice, and a value with control characters. ``Authorization`` (or a token exchange's
  header) that the backend's outgoing strategy also sets is refused by the gateway's rules.
* ``allowPrivateEndpoint`` (default false): as ToolHive, a ``remoteUrl`` whose host is private,
  loopback, link-local or unspecified is refused unless it is true. Checked at load time for
  literal IP hosts and ``localhost`` only: names are not resolved at load time (a name that
  resolves to a private address is not caught).
* **MCPToolConfig**: ``toolsFilter`` (an allow-list of names as the client sees them, after the
  overrides, as in ToolHive) and ``toolsOverride`` (keyed by the original name: ``name``,
  ``description``; ``annotations`` is ignored with a warning). Used by ``toolConfigRef`` of an
  MCPServer reached by ``url`` or ``command`` and of an MCPRemoteProxy (the backend's own stage,
  applied first), and of ``aggregation.tools[]`` (merged with the inline rules, ToolHive's
  precedence: a non-empty inline ``filter`` wins; an inline override of a tool wins).
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Sequence
from typing import Protocol
from urllib.parse import urlsplit

from . import models as m
from .plan import HttpEndpoint, SecretValue, StaticHeader, ToolOverridePlan, WorkloadToolsPlan
from .problems import PathPart
from .report import Report, Resource


class Resolver(Protocol):
    """What these rules use of :class:`~.resolver.Resolver` (which calls them)."""

    report: Report

    def ref(self, owner: Resource, path: Sequence[PathPart], kind: str,
            name: str) -> Resource | None: ...

    def secret(self, owner: Resource, path: Sequence[PathPart],
               ref: m.SecretKeyRef) -> SecretValue | None: ...

__all__ = [
    "REFUSED_HEADERS",
    "bad_value",
    "check_filter_names",
    "check_tool_config",
    "header_problem",
    "merge_tool_config",
    "override_plan",
    "private_host",
    "read_ca_bundle",
    "remote_endpoint",
    "tool_config_plan",
]

REFUSED_HEADERS = frozenset({
    "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
    "upgrade", "proxy-authenticate", "proxy-authorization", "host", "content-length",
    "content-type", "accept", "last-event-id", "forwarded", "traceparent", "tracestate",
    "baggage",
})
"""Header names ``headerForward`` may not set (besides ``mcp-*`` and ``x-forwarded-*``)."""


def header_problem(name: str) -> str | None:
    """Why a configured header may not be sent under ``name`` (None: it may)."""
    lower = name.lower()
    if lower.startswith("mcp-"):
        return "is the MCP transport's own header (vmcp sets the Mcp-* headers itself)"
    if lower.startswith("x-forwarded-") or lower == "forwarded":
        return "would spoof a proxy's forwarding headers (refused, as in ToolHive)"
    if lower in REFUSED_HEADERS:
        return "is a hop-by-hop or transport header that vmcp sets itself"
    return None


def bad_value(value: str) -> bool:
    """A header value with control characters (it could split the request)."""
    return any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in value)


def private_host(url: str) -> str | None:
    """What is private about ``url``'s host (``loopback``...), or None: checked for a literal IP
    address and ``localhost``; a name is not resolved."""
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return None
    if host == "localhost" or host.endswith(".localhost"):
        return "loopback"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for kind in ("unspecified", "loopback", "link_local", "private"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return None


def remote_endpoint(resolver: Resolver, resource: Resource) -> HttpEndpoint | None:
    """The endpoint of an MCPServerEntry or MCPRemoteProxy; None when a rule failed."""
    spec: m.ServerEntrySpec | m.RemoteProxySpec = resource.spec
    report = resolver.report
    path: tuple[PathPart, ...] = ("spec",)
    if spec.group_ref is not None:
        resolver.ref(resource, (*path, "groupRef", "name"), "MCPGroup", spec.group_ref.name)
    if spec.external_auth_config_ref is not None:
        resolver.ref(resource, (*path, "externalAuthConfigRef", "name"),
                     "MCPExternalAuthConfig", spec.external_auth_config_ref.name)
    url, url_field = spec.remote_url, "remoteUrl"
    if isinstance(spec, m.RemoteProxySpec):
        legacy = spec.remote_url_legacy
        if url is not None and legacy is not None and url != legacy:
            report.error(resource, (*path, "remoteURL"), "conflict",
                         "differs from spec.remoteUrl (remoteURL is its name up to ToolHive "
                         "v0.15): set only remoteUrl")
        elif url is None and legacy is not None:
            url, url_field = legacy, "remoteURL"
        elif url is None:
            report.error(resource, (*path, "remoteUrl"), "required",
                         "is required: the URL of the remote MCP server")
    if url is not None and not spec.allow_private_endpoint:
        private = private_host(url)
        if private is not None:
            report.error(resource, (*path, url_field), "private-endpoint",
                         f"has a host that is {private}: refused unless "
                         "spec.allowPrivateEndpoint is true, as in ToolHive (only literal "
                         "addresses and localhost are checked at load time; names are not "
                         "resolved)")
    headers = _headers(resolver, resource, spec.header_forward)
    ca_bundle = None
    if isinstance(spec, m.ServerEntrySpec) and spec.ca_bundle_ref is not None:
        ca_bundle = read_ca_bundle(resolver, resource, spec.ca_bundle_ref,
                                   ("spec", "caBundleRef"), url)
    if url is None or headers is None or resource.broken:
        return None
    return HttpEndpoint(url, spec.transport, headers=headers, ca_bundle=ca_bundle)


def read_ca_bundle(resolver: Resolver, resource: Resource, ref: m.CABundleRef,
                   at: tuple[PathPart, ...], url: str | None) -> str | None:
    """The PEM certificates of the ``caBundleRef`` at ``at`` (reported when missing or
    unreadable); ``url`` is what they are for (a warning when it is not https)."""
    here: tuple[PathPart, ...] = (*at, "configMapRef")
    selector = ref.config_map_ref
    target = resolver.ref(resource, (*here, "name"), "ConfigMap", selector.name)
    if target is None:
        return None
    config_map: m.ConfigMapResource = target.spec
    pem = config_map.data.get(selector.key)
    if pem is None:
        resolver.report.error(resource, (*here, "key"), "reference",
                              f"ConfigMap {target.namespace}/{selector.name} has no key "
                              f"{selector.key!r}")
        return None
    try:
        ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError):
        resolver.report.error(target, ("data", selector.key), "ca-bundle",
                              "is not PEM CA certificates")
        return None
    if url is not None and not url.startswith("https://"):
        resolver.report.warn(resource, at, "unused-field", "is unused: the URL is not https")
    return pem


def _headers(resolver: Resolver, resource: Resource,
             forward: m.HeaderForward | None) -> tuple[StaticHeader, ...] | None:
    if forward is None:
        return ()
    report = resolver.report
    here: tuple[PathPart, ...] = ("spec", "headerForward")
    errors_before = report.error_count
    seen: set[str] = set()
    out: list[StaticHeader] = []

    def check(name: str, where: tuple[PathPart, ...]) -> bool:
        problem = header_problem(name)
        if problem is not None:
            report.error(resource, where, "header-name", f"{name[:64]!r} {problem}")
            return False
        if name.lower() in seen:
            report.error(resource, where, "duplicate-name",
                         f"header {name[:64]!r} is given twice (names are case-insensitive)")
            return False
        seen.add(name.lower())
        return True

    for name, value in sorted(forward.add_plaintext_headers.items()):
        where = (*here, "addPlaintextHeaders", name)
        if check(name, where):
            if bad_value(value):
                report.error(resource, where, "header-value",
                             "must not contain control characters (CR, LF, NUL...)")
            out.append(StaticHeader(name, value))
    for index, item in enumerate(forward.add_headers_from_secret):
        where = (*here, "addHeadersFromSecret", index)
        if not check(item.header_name, (*where, "headerName")):
            continue
        secret = resolver.secret(resource, (*where, "valueSecretRef"), item.value_secret_ref)
        if secret is None:
            continue
        try:
            text = secret.text()
        except UnicodeDecodeError:
            text = "\0"
        if bad_value(text):
            report.error(resource, (*where, "valueSecretRef"), "header-value",
                         f"Secret {secret.source} is not a usable header value (it must be "
                         "UTF-8 text without control characters; a trailing newline counts)")
            continue
        out.append(StaticHeader(item.header_name, secret))
    return None if report.error_count != errors_before else tuple(out)


def check_filter_names(resolver: Resolver, owner: Resource, path: Sequence[PathPart],
                       names: Sequence[str], overrides: dict[str, m.ToolOverride]) -> None:
    """A warning per filter entry that names a tool its overrides rename: the filter matches
    the new name (ToolHive's rule), so that tool would be hidden."""
    renamed = {tool: o.name for tool, o in overrides.items() if o.name and o.name != tool}
    for index, name in enumerate(names):
        new = renamed.get(name)
        if new is not None and new not in names:
            resolver.report.warn(owner, (*path, index), "filter-renamed",
                                 f"names {name!r}, which the overrides rename to {new!r}: the "
                                 "filter matches the name clients see (as in ToolHive), so "
                                 f"this tool is hidden; list {new!r} instead")


def check_tool_config(resolver: Resolver, resource: Resource) -> None:
    spec: m.ToolConfigSpec = resource.spec
    check_filter_names(resolver, resource, ("spec", "toolsFilter"), spec.tools_filter,
                       spec.tools_override)


def override_plan(tool: str, override: m.ToolOverride) -> ToolOverridePlan:
    """One tool's override: its new name, description and annotations (MCP's names)."""
    annotations: tuple[tuple[str, str | bool], ...] = ()
    if override.annotations is not None:
        given = override.annotations.model_dump(by_alias=True, exclude_none=True)
        annotations = tuple(sorted(given.items()))
    return ToolOverridePlan(tool, override.name, override.description, annotations)


def tool_config_plan(resolver: Resolver, owner: Resource, path: Sequence[PathPart],
                     ref: m.NameRef, workload: str) -> WorkloadToolsPlan | None:
    """The MCPToolConfig ``ref`` names, as rules for ``workload``; None (reported at ``path``)
    when it does not resolve."""
    target = resolver.ref(owner, (*path, "name"), "MCPToolConfig", ref.name)
    if target is None:
        return None
    spec: m.ToolConfigSpec = target.spec
    return WorkloadToolsPlan(
        workload=workload,
        filter=spec.tools_filter or None,
        overrides=tuple(override_plan(tool, o)
                        for tool, o in sorted(spec.tools_override.items())),
    )


def merge_tool_config(inline: WorkloadToolsPlan, config: WorkloadToolsPlan) -> WorkloadToolsPlan:
    """ToolHive's merge of ``aggregation.tools[]`` with its ``toolConfigRef``: the inline
    filter when it is not empty, else the config's; every inline override, and the config's
    for the other tools."""
    overrides = {o.tool: o for o in config.overrides}
    overrides.update({o.tool: o for o in inline.overrides})
    return WorkloadToolsPlan(
        workload=inline.workload,
        filter=inline.filter if inline.filter else config.filter,
        overrides=tuple(overrides[tool] for tool in sorted(overrides)),
        exclude_all=inline.exclude_all,
    )
