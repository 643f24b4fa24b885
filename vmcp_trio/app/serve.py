"""``vmcp serve``'s process: the configuration loaded (once at start, again at each reload), the
process prepared for it, and the gateway run until a signal.

The rules it keeps:

* One loading (:func:`load`) serves the start and every reload: the files validated, every
  problem said, the VirtualMCPServer chosen (the files' only one, or ``--name``), and anonymous
  incoming auth refused on a listener that is not loopback unless
  ``--allow-anonymous-on-network`` says it is meant.
* At start, an invalid configuration or no VirtualMCPServer to serve exits 1; anonymous auth on
  a network listener exits 2 (the operator's flags); files that cannot be read are a usage
  error. At a reload the same findings keep the old configuration serving.
* Before the server starts: the manifest's telemetry settings (``telemetryConfigRef``) become
  ``OTEL_*`` variables, under the process's own (which win), its CA bundle a private file of this
  process (mode 0600, removed at exit); traces are configured; the open-file limit is raised.
* Once listening, the endpoint is said: a few lines for a person, or one JSON object with
  ``--log-format json``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NoReturn

from ..auth.ssrf import is_loopback_host
from ..defaults import EXIT_INVALID, EXIT_USAGE
from ..gateway.server import MCP_PATH
from ..gateway.settings import GatewaySettings
from ..resources import ConfigPathError, LoadOptions, validate_paths
from ..resources.loading import fingerprint
from ..resources.plan import AnonymousIncoming, GatewayPlan, TelemetryPlan
from ..runtime.logs import say
from .gateway import run_gateway
from .reload import Loaded
from .running import TracesUnavailable, configure_traces, raise_open_file_limit, run_server

__all__ = ["ConfigSource", "choose", "exposure", "load", "serve", "telemetry_environment"]


@dataclass(frozen=True)
class ConfigSource:
    """Where the configuration comes from and what may be served of it."""

    paths: tuple[str, ...]
    options: LoadOptions
    name: str | None
    """``--name``."""
    host: str
    allow_anonymous_on_network: bool = False


def choose(plans: Sequence[GatewayPlan], name: str | None) -> tuple[GatewayPlan | None, str]:
    """The VirtualMCPServer to serve: the one of the files, or the one named (``NAME`` or
    ``NAMESPACE/NAME``); else None and why."""
    chosen = [p for p in plans if name is None or p.answers_to(name)]
    if len(chosen) == 1:
        return chosen[0], ""
    found = ", ".join(f"{p.namespace}/{p.name}" for p in plans) or "none"
    if not chosen:
        why = f"no VirtualMCPServer named {name!r}"
    else:
        why = (f"several VirtualMCPServers named {name!r}" if name
               else "several VirtualMCPServers") + "; choose one with --name NAMESPACE/NAME"
    return None, f"{why} (found: {found})"


def exposure(plan: GatewayPlan, source: ConfigSource) -> str | None:
    """Why ``plan`` may not be served on the source's listener (anonymous on the network)."""
    if (not isinstance(plan.incoming, AnonymousIncoming) or is_loopback_host(source.host)
            or source.allow_anonymous_on_network):
        return None
    return (f"VirtualMCPServer {plan.namespace}/{plan.name} has anonymous incoming auth and "
            f"--host {source.host} is not a loopback address: anyone who reaches the port "
            "could call every tool. Use incomingAuth type oidc, or pass "
            "--allow-anonymous-on-network (VMCP_ALLOW_ANONYMOUS_ON_NETWORK=true) if that is "
            "meant")


def load(source: ConfigSource) -> Loaded:
    """The configuration: every problem, and the plan to serve when there is one (else why).
    Raises :class:`ConfigPathError` (files that cannot be read)."""
    result = validate_paths(list(source.paths), source.options)
    if not result.ok:
        return Loaded(None, list(result.problems), None, result.digest)
    chosen, reason = choose(result.plans, source.name)
    return Loaded(chosen, list(result.problems), reason, result.digest)


def _reload(source: ConfigSource) -> Loaded:
    """:func:`load` for a reload: every finding a reason to keep the old configuration."""
    try:
        loaded = load(source)
    except ConfigPathError as exc:
        return Loaded(None, [], f"--config {exc}")
    exposed = exposure(loaded.plan, source) if loaded.plan is not None else None
    return loaded._replace(plan=None, why=exposed) if exposed is not None else loaded


def telemetry_environment(telemetry: TelemetryPlan) -> dict[str, str]:
    """The ``OTEL_*`` variables of a ``telemetryConfigRef``, its CA bundle written to a file of
    this process's own (see the module)."""
    variables = telemetry.environment()
    if telemetry.ca_bundle is not None:
        folder = tempfile.mkdtemp(prefix="vmcp-otlp-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        path = os.path.join(folder, "ca.pem")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
            out.write(telemetry.ca_bundle)
        variables["OTEL_EXPORTER_OTLP_CERTIFICATE"] = path
    return variables


def _announce(plan: GatewayPlan, log_format: str) -> Callable[[list[str]], None]:
    def ready(urls: list[str]) -> None:
        backends = ", ".join(b.name for b in plan.backends)
        status = next((url for url in urls if not url.endswith(MCP_PATH)), None)
        if log_format == "json":
            say(f"MCP endpoint: {urls[0]} (Streamable HTTP)", stream=sys.stdout, url=urls[0],
                server=f"{plan.namespace}/{plan.name}", backends=[b.name for b in plan.backends],
                **({"status": status} if status else {}))
            return
        say(f"vmcp-trio: VirtualMCPServer {plan.namespace}/{plan.name} with "
            f"{len(plan.backends)} backend(s) ({backends})\n"
            f"  MCP endpoint: {urls[0]}  (Streamable HTTP)\n"
            + (f"  Status page:  {status}  (vmcp status {status})\n" if status else "") +
            "  Connect an MCP client to that URL, for example:\n"
            f"    npx @modelcontextprotocol/inspector --cli {urls[0]} --transport http "
            "--method tools/list\n"
            "  Press Ctrl-C to stop.", stream=sys.stdout)
    return ready


def serve(source: ConfigSource, settings: GatewaySettings, *, tls_cert: str | None,
          tls_key: str | None, watch: bool, log_format: str,
          usage_error: Callable[[str], NoReturn]) -> int:
    """``vmcp serve`` from here on: its exit code."""
    try:
        plan, problems, why, digest = load(source)
    except ConfigPathError as exc:
        usage_error(f"--config {exc}")
    for found in problems:
        say(str(found), level=found.severity.value, **found.as_dict())
    if plan is None:
        errors = sum(1 for found in problems if found.severity.value == "error")
        say(f"vmcp: the configuration has {errors} error(s); not starting" if errors
            else f"vmcp: {why}", level="error")
        return EXIT_INVALID
    exposed = exposure(plan, source)
    if exposed is not None:
        say(f"vmcp: {exposed}", level="error")
        return EXIT_USAGE
    if plan.telemetry is not None:
        for name, value in telemetry_environment(plan.telemetry).items():
            os.environ.setdefault(name, value)
    try:
        configure_traces()
    except TracesUnavailable as exc:
        usage_error(str(exc))
    raise_open_file_limit()
    return run_server(partial(
        run_gateway, plan, settings, tls_cert=tls_cert, tls_key=tls_key, config_digest=digest,
        load=partial(_reload, source),
        fingerprint=partial(fingerprint, list(source.paths)) if watch else None,
        on_ready=_announce(plan, log_format)), "vmcp")
