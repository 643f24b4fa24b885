"""The environment provider: a secret NAME is the variable ``VMCP_SECRET_<NAME>``.

Rules kept here:

* The variable of a name is :func:`vmcp_trio.secrets.names.env_variable`'s (upper case,
  non-alphanumerics as ``_``).
* An empty variable counts as unset: it neither provides a value nor hides the encrypted file
  (an optional Kubernetes secret mounted as an empty variable is "no override").
* The provider is read-only: ``vmcp secret set`` and ``delete`` never touch the environment.
* The environment is copied when the provider is made; later changes are not seen.
"""

from __future__ import annotations

from collections.abc import Mapping

from .names import env_variable, name_of_variable

__all__ = ["EnvironmentProvider"]


class EnvironmentProvider:
    """Secrets from ``VMCP_SECRET_*`` variables."""

    label = "env"

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = {k: v for k, v in environ.items() if name_of_variable(k) is not None}

    def variable(self, name: str) -> str:
        return env_variable(name)

    def get(self, name: str) -> str | None:
        """The value of ``name``, or None when its variable is unset or empty."""
        return self._environ.get(env_variable(name)) or None

    def names(self) -> list[str]:
        """The names of the set, non-empty variables, as their suffixes."""
        return sorted(name for var, value in self._environ.items()
                      if value and (name := name_of_variable(var)) is not None)
