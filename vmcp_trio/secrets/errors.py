"""The errors of the secrets manager, and which of them are the operator's to fix.

Rules kept here:

* Every error derives from :class:`SecretsError`, and its message is one line meant for an
  operator: it names the secret, the variable or the file concerned, and never a secret's value
  (nor a password, a key, or a fragment of a decrypted file).
* :class:`SecretsUsageError` and its subclasses are things the operator fixes by changing the
  command or the environment (a bad name, no key configured, an unreadable key file): the
  ``vmcp secret`` command exits 2 for them. Every other :class:`SecretsError` (not found, wrong
  key, damaged file, a failed write) exits 1.
"""

from __future__ import annotations

__all__ = [
    "DecryptError",
    "InvalidSecretName",
    "InvalidSecretValue",
    "KeyFileError",
    "KeyringFailure",
    "NoKeyConfigured",
    "SecretNotFound",
    "SecretsError",
    "SecretsFileError",
    "SecretsUsageError",
]


class SecretsError(Exception):
    """Any failure of the secrets manager; ``str(error)`` is one line for an operator."""


class SecretsUsageError(SecretsError):
    """The command or the environment must change (exit 2)."""


class InvalidSecretName(SecretsUsageError, ValueError):
    """A name outside the rule of :mod:`vmcp_trio.secrets.names`."""


class InvalidSecretValue(SecretsUsageError, ValueError):
    """An empty value (an empty variable counts as unset, too) or one over the size limit:
    nothing is stored."""


class NoKeyConfigured(SecretsUsageError):
    """The encrypted file must be opened, and the key it was sealed with is not at hand (its
    password is not set, its key file is neither configured nor at the default path)."""


class KeyFileError(SecretsUsageError):
    """A key file (``VMCP_SECRETS_KEY_FILE``, or the default one) cannot be read or does not
    hold a key."""


class KeyringFailure(SecretsUsageError):
    """The OS keyring should hold the key, and cannot give it: there is none here, it
    refused, or its entry is not a key."""


class SecretNotFound(SecretsError, LookupError):
    """No provider holds the secret. The message names the secret and every place looked."""

    def __init__(self, name: str, places: tuple[str, ...] = ()) -> None:
        self.name = name
        self.places = places
        where = f": looked in {' and '.join(places)}" if places else ""
        super().__init__(f"no secret {name!r}{where}")


class SecretsFileError(SecretsError):
    """The encrypted file cannot be read, parsed or written."""


class DecryptError(SecretsFileError):
    """The file does not open with the configured key: a wrong password or key file, or a file
    altered since it was written (AES-GCM cannot tell the two apart)."""
