"""The defaults the outside world sees (CONTRACT.md), in a module that imports nothing, so the
command line can show them in ``--help`` without loading the stacks that use them."""

from __future__ import annotations

__all__ = ["DEFAULT_API_GROUP", "DEFAULT_BACKEND_URL_TEMPLATE", "DEFAULT_NAMESPACE",
           "DEFAULT_PROXY_PORT", "DEFAULT_STATUS_URL", "EXIT_INVALID", "EXIT_OK", "EXIT_USAGE",
           "HMAC_FILE", "SERVICE_ACCOUNT_DIR", "SIGNING_KEY_FILE"]

DEFAULT_API_GROUP = "toolhive.stacklok.dev"
"""The API group of the resources' ``apiVersion`` (ToolHive's, so its manifests load)."""

DEFAULT_BACKEND_URL_TEMPLATE = "http://mcp-{name}-proxy.{namespace}.svc.cluster.local:{port}"
"""Where an MCPServer without ``url`` or ``command`` is reached: the Service ToolHive's operator
creates for it. ``/mcp`` (or ``/sse`` for ``transport: sse``) is appended."""

DEFAULT_NAMESPACE = "default"
"""The namespace of documents without ``metadata.namespace`` when ``--namespace`` is not given."""

DEFAULT_PROXY_PORT = 8080

DEFAULT_STATUS_URL = "http://127.0.0.1:4484/"
"""Where ``vmcp status`` looks without a URL: the status view ``make run`` serves
(``--diagnostics-port 4484``)."""

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where a pod's service-account token and CA are mounted."""

EXIT_OK = 0
EXIT_INVALID = 1
"""The configuration has errors (every one is listed), or the process failed at run time."""
EXIT_USAGE = 2
"""A usage or operator error (a flag, a path, a port in use), said in one line."""

SIGNING_KEY_FILE = "signing-key.pem"
HMAC_FILE = "hmac-secret"
"""The file names (and Secret keys) ``vmcp keys generate`` writes."""
