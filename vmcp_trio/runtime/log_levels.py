"""The logging flags every server command shares (``--log-format``, ``--log-level`` and
``--debug``) and the level they choose; :func:`vmcp_trio.runtime.logs.configure_logging` is where
logging is set up from them. The module imports nothing else: the command line builds its parser
with it on every start."""

from __future__ import annotations

import argparse

__all__ = ["LOG_LEVELS", "add_log_flags", "chosen_level"]

LOG_LEVELS = ("debug", "info", "warning", "error")
"""The levels of ``--log-level``, most verbose first (the access records are ``info``)."""


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--log-format``, ``--log-level`` and ``--debug`` to a server command's parser."""
    parser.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="log format (default: %(default)s)")
    parser.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS, default="info",
                        help="the least severe log records written; access records are info "
                             "(default: %(default)s)")
    parser.add_argument("--debug", action="store_true", help="the same as --log-level debug")


def chosen_level(args: argparse.Namespace) -> str:
    """The level the flags choose: ``--debug`` is ``--log-level debug``."""
    return "debug" if args.debug else str(args.log_level)
