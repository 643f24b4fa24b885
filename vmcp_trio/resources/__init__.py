"""Declarative resources: loading, checking and resolving them into a plan.

Use :func:`validate_paths` (files and folders) or :func:`validate_documents`; both return a
:class:`ValidationResult` with every problem and, when there is no error, one
:class:`~vmcp_trio.resources.plan.GatewayPlan` per VirtualMCPServer.
"""

from .loading import ConfigPathError
from .validate import LoadOptions, ValidationResult, validate_documents, validate_paths

__all__ = [
    "ConfigPathError",
    "LoadOptions",
    "ValidationResult",
    "validate_documents",
    "validate_paths",
]
