"""What a secret may be called, and which environment variable stands for a name.

Rules kept here:

* A name is a whole secret, 1 to 128 characters of ``A-Z a-z 0-9 _ . -``, or one key of a
  Secret, ``SECRET/KEY`` (:func:`ref_name`: what a ``{name, key}`` reference of the configuration
  looks up), each part up to 253 of those characters and ``SECRET`` starting with a letter or a
  digit, as Kubernetes' names do. Anything else is refused before a provider is asked (so a name
  can never smuggle a newline or an option into a message).
* The environment variable of a whole secret is ``VMCP_SECRET_<NAME>``, and of one key
  ``VMCP_SECRET_<SECRET>__<KEY>``: each part upper-cased, every character that is not a letter
  or a digit written as ``_`` (``github.token`` and ``GITHUB_TOKEN`` both read
  ``VMCP_SECRET_GITHUB_TOKEN``; ``vmcp-redis/password`` reads
  ``VMCP_SECRET_VMCP_REDIS__PASSWORD``). The mapping is many-to-one on purpose (variables cannot
  hold dots, dashes or slashes); the reverse of a variable is ``SECRET/KEY`` split at its first
  ``__`` when that makes a name, else its suffix as written.
* The manager's own settings are ``VMCP_SECRETS_...`` (plural), so they never look like a secret.
"""

from __future__ import annotations

import re

from .errors import InvalidSecretName

__all__ = ["ENV_PREFIX", "NAME_RULE", "check_name", "env_variable", "name_of_variable",
           "ref_name"]

ENV_PREFIX = "VMCP_SECRET_"
NAME_RULE = ("1-128 characters of A-Z, a-z, 0-9, '_', '.' and '-', or SECRET/KEY for one key "
             "of a Secret (each part up to 253 of them, SECRET starting with a letter or digit)")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}|[A-Za-z0-9][A-Za-z0-9_.-]{0,252}/[A-Za-z0-9_.-]{1,253}")
_ALLOWED = re.compile(r"[A-Za-z0-9_./-]")
_NOT_ALNUM = re.compile(r"[^A-Z0-9]")
_VARIABLE_SUFFIX = re.compile(r"[A-Z0-9_]{1,508}")


def ref_name(secret: str, key: str) -> str:
    """The name of one key of a Secret: what a ``{name, key}`` reference looks up."""
    return f"{secret}/{key}"


def check_name(name: str) -> str:
    """``name`` itself, or :class:`InvalidSecretName`. The message says what is wrong (the
    length, the characters not allowed) without repeating the name: what was typed as a name
    may be a pasted value."""
    if _NAME.fullmatch(name):
        return name
    secret, slash, key = name.partition("/")
    bad = sorted({c for c in name if not _ALLOWED.fullmatch(c)})
    if not name:
        why = "it is empty"
    elif bad:
        shown = ", ".join(repr(c).encode("ascii", "backslashreplace").decode() for c in bad[:5])
        why = f"{shown} not allowed"
    elif not slash:
        why = f"{len(name)} characters, at most 128"
    elif not secret or not key or "/" in key:
        why = "one '/' between SECRET and KEY, both not empty"
    elif not secret[0].isalnum():
        why = "SECRET must start with a letter or a digit"
    else:
        why = "SECRET and KEY are at most 253 characters each"
    raise InvalidSecretName(f"invalid secret name ({why}): use {NAME_RULE}")


def env_variable(name: str) -> str:
    """The environment variable that provides ``name`` (checked first)."""
    secret, slash, key = check_name(name).partition("/")
    variable = ENV_PREFIX + _NOT_ALNUM.sub("_", secret.upper())
    return variable + "__" + _NOT_ALNUM.sub("_", key.upper()) if slash else variable


def name_of_variable(variable: str) -> str | None:
    """The secret name a ``VMCP_SECRET_*`` variable stands for (``SECRET/KEY`` or its suffix, see
    the module), or None when the variable is not one: another prefix, or a suffix that no name
    maps to (lower case, a dot), which :func:`env_variable` would never look up."""
    if not variable.startswith(ENV_PREFIX):
        return None
    suffix = variable[len(ENV_PREFIX):]
    if not _VARIABLE_SUFFIX.fullmatch(suffix):
        return None
    secret, separator, key = suffix.partition("__")
    if separator and _NAME.fullmatch(keyed := f"{secret}/{key}"):
        return keyed
    return suffix if _NAME.fullmatch(suffix) else None
