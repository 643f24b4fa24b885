"""What a secret may be called, and which environment variable stands for a name.

Rules kept here:

* A name is 1 to 128 characters of ``A-Z a-z 0-9 _ . -``; anything else is refused before a
  provider is asked (so a name can never smuggle a path, a newline or an option into a message).
* The environment variable of a name is ``VMCP_SECRET_`` followed by the name upper-cased, every
  character that is not a letter or a digit written as ``_``: ``github.token`` and
  ``GITHUB_TOKEN`` both read ``VMCP_SECRET_GITHUB_TOKEN``. The mapping is many-to-one on purpose
  (variables cannot hold dots or dashes); the reverse of a variable is its suffix as written.
* The manager's own settings are ``VMCP_SECRETS_...`` (plural), so they never look like a secret.
"""

from __future__ import annotations

import re

from .errors import InvalidSecretName

__all__ = ["ENV_PREFIX", "NAME_RULE", "check_name", "env_variable", "name_of_variable"]

ENV_PREFIX = "VMCP_SECRET_"
NAME_RULE = "1-128 characters of A-Z, a-z, 0-9, '_', '.' and '-'"
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_NOT_ALNUM = re.compile(r"[^A-Z0-9]")
_VARIABLE_SUFFIX = re.compile(r"[A-Z0-9_]{1,128}")


def check_name(name: str) -> str:
    """``name`` itself, or :class:`InvalidSecretName`. The message says what is wrong (the
    length, the characters not allowed) without repeating the name: what was typed as a name
    may be a pasted value."""
    if _NAME.fullmatch(name):
        return name
    if not name:
        why = "it is empty"
    elif len(name) > 128:
        why = f"{len(name)} characters, at most 128"
    else:
        bad = sorted({c for c in name if not _NAME.fullmatch(c)})
        shown = ", ".join(repr(c).encode("ascii", "backslashreplace").decode() for c in bad[:5])
        why = f"{shown} not allowed"
    raise InvalidSecretName(f"invalid secret name ({why}): use {NAME_RULE}")


def env_variable(name: str) -> str:
    """The environment variable that provides ``name`` (checked first)."""
    return ENV_PREFIX + _NOT_ALNUM.sub("_", check_name(name).upper())


def name_of_variable(variable: str) -> str | None:
    """The secret name a ``VMCP_SECRET_*`` variable stands for (its suffix), or None when the
    variable is not one: another prefix, or a suffix that no name maps to (lower case, a dot),
    which :func:`env_variable` would never look up."""
    if not variable.startswith(ENV_PREFIX):
        return None
    suffix = variable[len(ENV_PREFIX):]
    return suffix if _VARIABLE_SUFFIX.fullmatch(suffix) else None
