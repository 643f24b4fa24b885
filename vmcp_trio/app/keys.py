"""``vmcp keys generate``: a new signing key and HMAC secret, as files or as a Secret document.

The keys come from :mod:`vmcp_trio.authserver.keygen`; this module puts them where the operator
asked:

* :func:`write_key_files`: ``signing-key.pem`` and ``hmac-secret`` (:mod:`vmcp_trio.defaults`) in a
  folder, each created with mode 0600 and never overwritten (an existing file is an error naming
  it, and nothing is written after it).
* :func:`secret_document`: a ``v1`` Secret (``stringData``) holding both under those keys, for
  ``signingKeySecretRefs`` and ``hmacSecretRefs``.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..authserver.keygen import KeyType, generate_hmac_secret, generate_signing_key
from ..defaults import HMAC_FILE, SIGNING_KEY_FILE

__all__ = ["KeyFileError", "secret_document", "write_key_files"]


class KeyFileError(Exception):
    """The key files cannot be written as asked; the message names the folder and the file."""


def write_key_files(folder: Path, key_type: KeyType, rsa_bits: int) -> list[Path]:
    """Write a new key and secret into ``folder``; the files written. Raises KeyFileError."""
    if not folder.is_dir():
        raise KeyFileError(f"--output-dir {folder}: no such folder")
    written = []
    for name, data in ((SIGNING_KEY_FILE, generate_signing_key(key_type, rsa_bits)),
                       (HMAC_FILE, generate_hmac_secret())):
        target = folder / name
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise KeyFileError(f"--output-dir {folder}: {name} exists; not overwriting "
                               "it") from None
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        written.append(target)
    return written


def secret_document(name: str, namespace: str | None, key_type: KeyType, rsa_bits: int) -> str:
    """A Secret document holding a new key and secret (its name and namespace already
    checked)."""
    pem = generate_signing_key(key_type, rsa_bits)
    lines = ["apiVersion: v1", "kind: Secret", "metadata:", f"  name: {name}"]
    if namespace:
        lines.append(f"  namespace: {namespace}")
    lines += ["type: Opaque", "stringData:", f"  {SIGNING_KEY_FILE}: |"]
    lines += [f"    {line}" for line in pem.decode("ascii").splitlines()]
    lines.append(f'  {HMAC_FILE}: "{generate_hmac_secret().decode("ascii")}"')
    return "\n".join(lines)
