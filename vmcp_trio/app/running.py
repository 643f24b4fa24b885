"""Running a server command's process to its end, and the exit code it ends with.

Every server command (``vmcp serve``, ``vmcp proxy``, ``vmcp proxy tunnel``, ``vmcp tunnel
relay``) is one ``trio.run`` of its main function. :func:`run_server` runs it, says each
operator error it raised as one line (never a traceback), and maps it to the exit code the
command line promises: an incoming auth mode that cannot be set up is 1 (the configuration), as
is a tunnel agent whose token the relay keeps refusing; a port that is taken or a certificate
that does not load is 2 (the operator's flags). The process
also takes its hard limit on open files (:func:`raise_open_file_limit`): every client stream is
a socket, and tunes the garbage collector for a server (:func:`settle_garbage_collection`).
Traces are configured before (:func:`configure_traces`) and flushed at the end.
"""

from __future__ import annotations

import gc
import resource
from collections.abc import Awaitable, Callable

import trio

from ..auth.incoming.build import IncomingAuthError
from ..defaults import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from ..http.serving import ListenError
from ..runtime import tracing
from ..runtime.logs import say
from ..tunnel.agent import TokenRefused

__all__ = ["TracesUnavailable", "configure_traces", "raise_open_file_limit", "run_server",
           "settle_garbage_collection"]


class TracesUnavailable(Exception):
    """Traces are asked for (``OTEL_*``) and cannot be set up; the message says why."""


def configure_traces() -> None:
    """Set up traces from the ``OTEL_*`` variables (raises :class:`TracesUnavailable`)."""
    try:
        traces = tracing.configure()
    except tracing.TracingUnavailable as exc:
        raise TracesUnavailable(str(exc)) from None
    if traces is not None:
        say(f"vmcp: traces: exporting to {traces}")


def raise_open_file_limit() -> None:
    """Take the hard limit on open files, not the soft one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def settle_garbage_collection() -> None:
    """Tune the collector for a long-running server: everything imported so far lives as long as
    the process, so it is frozen out of every collection (a full one scanned it all: ~30 ms, and
    ~16 µs of each gateway call on average), and the young generation is collected every 10,000
    net allocations instead of 700 (a request allocates ~50 that outlive it for a while, and
    most of them die by reference count anyway: together the collector's share of a call went
    from ~28 µs to ~1 µs, bench/gateway_overhead.py)."""
    gc.set_threshold(10_000, 10, 10)
    gc.freeze()


def run_server(main: Callable[[], Awaitable[None]], command: str) -> int:
    """Run a server until it stops; the exit code (see the module)."""
    exit_code = EXIT_OK
    settle_garbage_collection()
    try:
        trio.run(main)
    except* IncomingAuthError as auth_errors:
        for error in auth_errors.exceptions:
            say(f"{command}: incoming auth: {error}", level="error")
        exit_code = EXIT_INVALID
    except* TokenRefused as refusals:
        say(f"{command}: {refusals.exceptions[0]}", level="error")
        exit_code = EXIT_INVALID
    except* ListenError as listen_errors:
        for refusal in listen_errors.exceptions:
            say(f"{command}: {refusal}", level="error")
        exit_code = EXIT_USAGE
    finally:
        tracing.shutdown()
    return exit_code
