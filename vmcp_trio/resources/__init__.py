"""Declarative resources: loading, checking and resolving them into a plan.

Use :func:`validate_paths` (files and folders) or :func:`validate_documents`; both return a
:class:`ValidationResult` with every problem and, when there is no error, one
:class:`~vmcp_trio.resources.plan.GatewayPlan` per VirtualMCPServer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .loading import ConfigPathError
    from .validate import LoadOptions, ValidationResult, validate_documents, validate_paths

__all__ = [
    "ConfigPathError",
    "LoadOptions",
    "ValidationResult",
    "validate_documents",
    "validate_paths",
]


def __getattr__(name: str) -> Any:
    """Load the validation stack (pydantic, YAML) on first use, not on import of a submodule:
    ``vmcp --help`` and the small modules here (durations) stay light."""
    if name == "ConfigPathError":
        from .loading import ConfigPathError
        return ConfigPathError
    if name in __all__:
        from . import validate
        return getattr(validate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
