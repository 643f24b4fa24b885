"""A VirtualMCPServer's static backends (``spec.config.backends``): backends at a URL that join
the group's.

One job: check ``config.backends[]`` (ToolHive v0.10+) and give each its endpoint, with
ToolHive's rules and names:

* ``name`` (a DNS name: backends are known by name, in tool prefixes and in
  ``outgoingAuth.backends``), ``url``, ``transport`` (``sse`` or ``streamable-http``), ``type``
  (empty, or ``entry`` for a remote server reached directly); ``caBundlePath`` only with ``type:
  entry``, an absolute path without ``..``: a PEM file of CA certificates the server's TLS
  certificate may also chain to, read when the configuration is loaded; ``metadata``, free labels
  nothing acts on.
* In ToolHive this is the list of a vMCP that does not discover its backends (static mode,
  ``outgoingAuth.source: inline``): its operator writes the group's backends there with their
  URLs, and its guide has users copy them there from ``status.discoveredBackends``, so a name
  there is a backend's of the group. Here the backends listed join the group's MCPServers,
  MCPServerEntries and MCPRemoteProxies: one named like a member of the group is that member,
  reached at the URL listed (as ToolHive's static mode reaches it), with its own settings
  (outgoing auth, headers, tool config, policies); any other is a backend of its own. A name
  listed twice is a ``duplicate-backend`` error (a backend is known by its name).
* A static backend has no ``externalAuthConfigRef`` of its own: with ``outgoingAuth.source:
  inline`` its entry in ``outgoingAuth.backends`` gives its credentials; else it gets none.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from pathlib import Path

from . import models as m
from .plan import HttpEndpoint
from .problems import PathPart
from .report import Report, Resource

__all__ = ["static_backends"]


def _ca_bundle(report: Report, gateway: Resource, at: tuple[PathPart, ...],
               backend: m.StaticBackend) -> str | None:
    """The PEM text of ``caBundlePath``; None when there is none or it is reported."""
    path = backend.ca_bundle_path
    if path is None:
        return None
    if backend.type != "entry":
        report.error(gateway, at, "unused-field", "is used only with type: entry (as in "
                     "ToolHive)")
        return None
    if "\0" in path or ".." in Path(path).parts or not Path(path).is_absolute():
        report.error(gateway, at, "ca-bundle", "must be an absolute path without '..'")
        return None
    try:
        pem = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        report.error(gateway, at, "ca-bundle", f"cannot be read: {why}")
        return None
    try:
        ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError):
        report.error(gateway, at, "ca-bundle", "is not a file of PEM CA certificates")
        return None
    if not backend.url.startswith("https://"):
        report.warn(gateway, at, "unused-field", "is unused: the URL is not https")
    return pem


def static_backends(report: Report, gateway: Resource, backends: Sequence[m.StaticBackend],
                    path: tuple[PathPart, ...]) -> dict[str, HttpEndpoint | None]:
    """Each static backend's name and endpoint (None when one of its rules failed); a name
    listed earlier is reported and left out."""
    found: dict[str, HttpEndpoint | None] = {}
    for index, backend in enumerate(backends):
        here = (*path, index)
        if backend.name in found:
            report.error(gateway, (*here, "name"), "duplicate-backend",
                         f"{backend.name!r} is listed twice: backends are known by name")
            continue
        errors_before = report.error_count
        ca_bundle = _ca_bundle(report, gateway, (*here, "caBundlePath"), backend)
        found[backend.name] = None if report.error_count != errors_before else HttpEndpoint(
            backend.url, backend.transport, ca_bundle=ca_bundle)
    return found
