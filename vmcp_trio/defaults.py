"""The defaults the outside world sees (CONTRACT.md), in a module that imports nothing, so the
command line can show them in ``--help`` without loading the stacks that use them."""

from __future__ import annotations

__all__ = ["DEFAULT_API_GROUP", "DEFAULT_BACKEND_URL_TEMPLATE", "DEFAULT_PROXY_PORT",
           "SERVICE_ACCOUNT_DIR"]

DEFAULT_API_GROUP = "toolhive.stacklok.dev"
"""The API group of the resources' ``apiVersion`` (ToolHive's, so its manifests load)."""

DEFAULT_BACKEND_URL_TEMPLATE = "http://mcp-{name}-proxy.{namespace}.svc.cluster.local:{port}"
"""Where an MCPServer without ``url`` or ``command`` is reached: the Service ToolHive's operator
creates for it. ``/mcp`` (or ``/sse`` for ``transport: sse``) is appended."""

DEFAULT_PROXY_PORT = 8080

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where a pod's service-account token and CA are mounted."""
