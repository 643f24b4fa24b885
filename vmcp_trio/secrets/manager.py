"""The secrets manager: one name, looked up in the environment first, then the encrypted file.

Rules kept here:

* ``get`` asks the environment provider, then the encrypted file: a ``VMCP_SECRET_<NAME>``
  variable (``VMCP_SECRET_<SECRET>__<KEY>`` for a name ``SECRET/KEY``) overrides the file (a
  deployment's override wins over what an operator stored). ``vmcp secret get``, the proxy's
  ``--remote-forward-headers-secret`` and the configuration's Secret references
  (:meth:`vmcp_trio.resources.resolver.Resolver.secret`) all look a name up here.
  The file is opened only when the environment does not answer, so a process given all its
  secrets as variables needs no key, even if a file exists.
* ``set`` and ``delete`` change the encrypted file only; the environment is read-only. The
  first ``set`` may make the file's key (:mod:`vmcp_trio.secrets.keys`): :attr:`new_key` says
  where it went.
* ``list`` gives names and the provider that answers for each (``env`` or ``file``), never a
  value: a name the file holds and a variable overrides is listed once, as ``env``.
* Every name is checked (:mod:`vmcp_trio.secrets.names`) before a provider is asked.
* Calls are blocking (file I/O, and one scrypt derivation per manager for a password): call
  them at start-up, or from a worker thread (``trio.to_thread.run_sync``), not on the event
  loop of a serving process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from .encrypted_file import EncryptedFileProvider, default_path
from .environment import EnvironmentProvider
from .errors import InvalidSecretValue, SecretNotFound
from .keys import KeySource
from .names import check_name

__all__ = ["MAX_VALUE_BYTES", "SecretListing", "SecretsManager"]

MAX_VALUE_BYTES = 1024 * 1024
"""The largest value ``set`` stores (a certificate chain fits many times over)."""

SecretListing = list[tuple[str, str]]
"""``[(name, provider), ...]`` sorted by name; provider is ``"env"`` or ``"file"``."""


class SecretsManager:
    """Secrets from ``VMCP_SECRET_*`` variables, then from the encrypted file."""

    def __init__(self, environment: EnvironmentProvider, file: EncryptedFileProvider) -> None:
        self.environment = environment
        self.file = file

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> SecretsManager:
        """The manager that ``environ`` (by default the process's) configures: its
        ``VMCP_SECRET_*`` variables, and the file and key of ``VMCP_SECRETS_FILE``,
        ``VMCP_SECRETS_PASSWORD`` and ``VMCP_SECRETS_KEY_FILE``."""
        env = dict(os.environ if environ is None else environ)
        return cls(EnvironmentProvider(env),
                   EncryptedFileProvider(default_path(env), KeySource.from_environ(env)))

    @property
    def path(self) -> Path:
        """The encrypted file's path (it may not exist)."""
        return self.file.path

    @property
    def new_key(self) -> str | None:
        """Where the key this manager made for a new file is, in one line (None: none made)."""
        return self.file.keys.created

    def get(self, name: str) -> str:
        """The value of ``name``, or :class:`SecretNotFound`."""
        return self.find(name)[0]

    def find(self, name: str) -> tuple[str, str]:
        """The value of ``name`` and where it was found (``variable VMCP_SECRET_...`` or
        ``encrypted file PATH``), or :class:`SecretNotFound`."""
        check_name(name)
        variable = f"environment variable {self.environment.variable(name)}"
        value = self.environment.get(name)
        if value is not None:
            return value, variable
        value = self.file.get(name)
        if value is None:
            raise SecretNotFound(name, (variable, f"encrypted file {self.file.path}"))
        return value, f"encrypted file {self.file.path}"

    def overriding_variable(self, name: str) -> str | None:
        """The variable that overrides the file for ``name``, when one is set."""
        check_name(name)
        if self.environment.get(name) is None:
            return None
        return self.environment.variable(name)

    def set(self, name: str, value: str) -> None:
        """Store ``value`` under ``name`` in the encrypted file (created if missing)."""
        check_name(name)
        if not value:
            raise InvalidSecretValue(f"empty value for {name!r}: nothing stored")
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidSecretValue(f"value for {name!r} is not valid text (UTF-8): "
                                     "nothing stored") from None
        if size > MAX_VALUE_BYTES:
            raise InvalidSecretValue(f"value for {name!r} is over {MAX_VALUE_BYTES} bytes: "
                                     "nothing stored")
        self.file.set(name, value)

    def delete(self, name: str) -> bool:
        """Remove ``name`` from the encrypted file; False when the file does not hold it (a
        variable of the same name is not touched)."""
        check_name(name)
        return self.file.delete(name)

    def list(self) -> SecretListing:
        """Every name and the provider that answers for it, sorted by name."""
        from_file = self.file.names()
        shadowed = {self.environment.variable(n) for n in from_file
                    if self.environment.get(n) is not None}
        listing = [(n, "env" if self.environment.variable(n) in shadowed else "file")
                   for n in from_file]
        listing += [(n, "env") for n in self.environment.names()
                    if self.environment.variable(n) not in shadowed]
        return sorted(listing)
