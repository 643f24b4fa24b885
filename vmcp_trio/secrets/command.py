"""``vmcp secret set|get|list|delete``: the secrets manager on the command line.

Rules kept here:

* ``set NAME`` reads the value from standard input, never from the command line: at a terminal
  it prompts without echo (``getpass``); from a pipe it reads everything and strips one trailing
  newline. A value typed after NAME is refused without being repeated.
* ``get NAME`` is the one way a value is printed: to standard output, with a newline. Nothing
  else prints a value, and no message carries one.
* ``list`` prints one line per secret, its name and the provider that answers for it (``file``,
  or ``env`` with the variable), never a value.
* The ``set`` that creates the file's key says where the key went, in one line on standard
  error (a new key file, or the OS keyring); no later command repeats it.
* Exit codes: 0 done; 1 not found, wrong key, damaged or unwritable file; 2 usage or operator
  error (a bad name, no key configured, an unreadable key file). Every error is one line on
  standard error starting ``vmcp secret: ``, never a traceback.
* The module imports only the standard library until it runs, so building the ``vmcp`` parser
  stays cheap.
"""

from __future__ import annotations

import argparse
import getpass
from collections.abc import Mapping
from typing import TextIO

__all__ = ["configure_parser", "run"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PREFIX = "vmcp secret: "


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the ``set``, ``get``, ``list`` and ``delete`` commands to the ``secret`` parser;
    the chosen one is ``args.secret_command``."""
    from .names import NAME_RULE

    if parser.epilog is None:
        parser.epilog = (
            "Secrets are looked up in the environment first (VMCP_SECRET_<NAME>, or "
            "VMCP_SECRET_<SECRET>__<KEY> for SECRET/KEY: upper-cased, other characters as '_'), "
            "then in the encrypted file (VMCP_SECRETS_FILE, default "
            "$XDG_CONFIG_HOME/vmcp/secrets.json.enc). Its key comes from VMCP_SECRETS_KEY_FILE, "
            "else VMCP_SECRETS_PASSWORD, else the OS keyring or the key file "
            "$XDG_CONFIG_HOME/vmcp/secrets.key, made by the first set. vmcp serve reads a "
            "Secret reference {name, key} of its configuration as NAME/KEY from here too.")
    commands = parser.add_subparsers(dest="secret_command", required=True, metavar="COMMAND")
    name_help = f"the secret's name: {NAME_RULE}"
    store = commands.add_parser(
        "set", help="store a secret in the encrypted file (value from standard input)",
        description="Store a secret in the encrypted file. The value is read from standard "
                    "input: typed without echo at a terminal, or piped (one trailing newline "
                    "is stripped). It is never taken from the command line.")
    store.add_argument("name", metavar="NAME", help=name_help)
    store.add_argument("stray", nargs="*", help=argparse.SUPPRESS)
    show = commands.add_parser(
        "get", help="print a secret's value",
        description="Print a secret's value and a newline: from its VMCP_SECRET_ variable "
                    "when set, else from the encrypted file. Exit 1 when neither holds it.")
    show.add_argument("name", metavar="NAME", help=name_help)
    commands.add_parser(
        "list", help="list the secrets' names and providers (never values)",
        description="List every secret's name and the provider that answers for it: env "
                    "(a VMCP_SECRET_* variable, which overrides the file) or file. Values are "
                    "never printed.")
    remove = commands.add_parser(
        "delete", help="remove a secret from the encrypted file",
        description="Remove a secret from the encrypted file (exit 1 when it holds none). "
                    "Variables of the environment are not touched.")
    remove.add_argument("name", metavar="NAME", help=name_help)


def run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO,
        environ: Mapping[str, str]) -> int:
    """Run the command that ``configure_parser``'s parser parsed into ``args``; the exit code."""
    from .errors import SecretsError, SecretsUsageError

    try:
        return _run(args, stdin, stdout, stderr, environ)
    except SecretsUsageError as exc:
        return _fail(stderr, str(exc), EXIT_USAGE)
    except SecretsError as exc:
        return _fail(stderr, str(exc), EXIT_FAILED)
    except OSError as exc:  # the providers wrap theirs; this is the last line of defence
        return _fail(stderr, exc.strerror or type(exc).__name__, EXIT_FAILED)


def _run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO,
         environ: Mapping[str, str]) -> int:
    from .manager import SecretsManager
    from .names import check_name, env_variable

    manager = SecretsManager.from_environment(environ)
    command = args.secret_command
    if command == "list":
        listing = manager.list()
        width = max((len(name) for name, _ in listing), default=0)
        for name, provider in listing:
            where = f"env ({env_variable(name)})" if provider == "env" else provider
            stdout.write(f"{name:<{width}}  {where}\n")
        return EXIT_OK
    name = check_name(args.name)
    if command == "get":
        stdout.write(manager.get(name) + "\n")
        stdout.flush()
        return EXIT_OK
    if command == "set":
        if args.stray:
            return _fail(stderr, "set takes the value on standard input, never on the command "
                                 "line (and one given there may be in your shell's history)",
                         EXIT_USAGE)
        value = _read_value(name, stdin, stderr)
        if value is None:
            return _fail(stderr, f"cancelled: {name!r} not stored", EXIT_USAGE)
        manager.set(name, value)
        stdout.write(f"stored {name!r} in {manager.path}\n")
        if manager.new_key is not None:
            stderr.write(f"{PREFIX}{manager.new_key}\n")
        variable = manager.overriding_variable(name)
        if variable is not None:
            stderr.write(f"{PREFIX}note: {variable} is set in this environment and overrides "
                         "the stored value\n")
        return EXIT_OK
    if command == "delete":
        if manager.delete(name):
            stdout.write(f"deleted {name!r} from {manager.path}\n")
            return EXIT_OK
        message = f"no secret {name!r} in {manager.path}"
        variable = manager.overriding_variable(name)
        if variable is not None:
            message += f" ({variable} is set in the environment; unset it there)"
        return _fail(stderr, message, EXIT_FAILED)
    raise AssertionError(f"unknown secret command {command!r}")


def _read_value(name: str, stdin: TextIO, stderr: TextIO) -> str | None:
    """The value for ``name`` from standard input; None when the operator cancelled."""
    from .errors import InvalidSecretValue

    try:
        if stdin.isatty():
            return getpass.getpass(f"Value of {name}: ", stream=stderr)
        value = stdin.read()
    except (EOFError, KeyboardInterrupt):
        return None
    except UnicodeDecodeError:
        raise InvalidSecretValue(f"the value for {name!r} on standard input is not valid "
                                 "text: nothing stored") from None
    if value.endswith("\r\n"):
        return value[:-2]
    return value.removesuffix("\n")


def _fail(stderr: TextIO, message: str, code: int) -> int:
    stderr.write(PREFIX + " ".join(message.split()) + "\n")
    stderr.flush()
    return code
