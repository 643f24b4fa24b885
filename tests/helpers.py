"""What many test modules share: where things are, the resource tests' tools, processes and
ports, and a private PKI.

* ``ROOT``, ``EXAMPLES`` and ``TOOLHIVE_MANIFESTS``: the repository, its examples/ and the real
  ToolHive manifests beside it;
* for the resource tests: :func:`example_docs` (an example as documents, to break one field at a
  time with :func:`set_field`/:func:`del_field` and :func:`resource`), :func:`validate` (through
  YAML text, as the CLI does), :func:`matching` and :func:`expect_error` (exactly the problem a
  test is about);
* :func:`free_port`, :func:`stop_process`/:func:`stop_processes` (SIGTERM, then SIGKILL past a
  deadline) and :func:`answers_ok` (is a URL up);
* :func:`private_ca`: a CA of our own and a certificate for 127.0.0.1 it signed.
"""

from __future__ import annotations

import copy
import datetime
import ipaddress
import os
import random
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from vmcp_trio.resources import LoadOptions, ValidationResult, validate_documents
from vmcp_trio.resources.loading import load_text
from vmcp_trio.resources.problems import Problem, Severity

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TOOLHIVE_MANIFESTS = ROOT.parent / "shared" / "toolhive" / "manifests"
"""The real ToolHive manifests (``../shared`` beside the repository, as in CI)."""


def example_docs(name: str) -> list[dict[str, Any]]:
    with (EXAMPLES / name).open(encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d is not None]


def validate(docs: list[Any], **options: Any) -> ValidationResult:
    """Validate documents as the CLI would, through YAML text (so positions are recorded)."""
    text = yaml.safe_dump_all(docs, sort_keys=False)
    parsed, problems = load_text(text, "test.yaml")
    return validate_documents(parsed, LoadOptions(**options), problems)


def resource(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    for doc in docs:
        if doc.get("kind") == kind and (name is None or doc["metadata"]["name"] == name):
            return doc
    raise KeyError((kind, name))


def _walk(doc: Any, path: str) -> tuple[Any, Any]:
    """The container and final key of a dotted path (list indexes as numbers)."""
    parts: list[Any] = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = doc
    for part in parts[:-1]:
        node = node[part]
    return node, parts[-1]


def set_field(doc: dict[str, Any], path: str, value: Any) -> None:
    node, last = _walk(doc, path)
    node[last] = copy.deepcopy(value)


def del_field(doc: dict[str, Any], path: str) -> None:
    node, last = _walk(doc, path)
    del node[last]


def matching(result: ValidationResult, *, rule: str | None = None, path: str | None = None,
             severity: Severity | None = None) -> list[Problem]:
    return [p for p in result.problems
            if (rule is None or p.rule == rule) and (path is None or p.path == path)
            and (severity is None or p.severity is severity)]


def expect_error(result: ValidationResult, rule: str, path: str, *, kind: str | None = None,
                 name: str | None = None, contains: str | None = None) -> Problem:
    """Exactly the problem the test is about: error, rule, path, resource and message."""
    found = matching(result, rule=rule, path=path, severity=Severity.ERROR)
    assert found, f"no {rule} error at {path}; got:\n" + "\n".join(map(str, result.problems))
    problem = found[0]
    if kind is not None:
        assert problem.kind == kind, str(problem)
    if name is not None:
        assert problem.name == name, str(problem)
    if contains is not None:
        assert contains in problem.message, str(problem)
    assert not result.ok and result.plans == ()
    assert problem.file == "test.yaml" and problem.document is not None
    return problem



_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_WORKER_PORTS = 4000
_next_port: int | None = None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    Under pytest-xdist (``make test`` runs two workers) each worker takes its ports from a
    range of its own below the kernel's ephemeral ports (worker ``gwN``: 10000 + 4000 N, 4000
    of them, in turn), so that no worker picks a port another one chose and is about to listen
    on; the kernel's own choices (a server binding port 0, an outgoing connection) stay in the
    ephemeral range above. Alone, the kernel picks."""
    global _next_port
    if not _WORKER.startswith("gw"):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    low = 10_000 + _WORKER_PORTS * int(_WORKER[2:])
    if _next_port is None:
        _next_port = low + random.randrange(_WORKER_PORTS)
    for _ in range(_WORKER_PORTS):
        port, _next_port = _next_port, low + (_next_port + 1 - low) % _WORKER_PORTS
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {low}-{low + _WORKER_PORTS - 1}")


def stop_process(process: subprocess.Popen[Any], timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL if it does not exit within ``timeout`` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


def stop_processes(processes: list[subprocess.Popen[Any]], timeout: float = 10) -> None:
    """:func:`stop_process` for several at once: SIGTERM to each, then each has until the same
    deadline to exit before SIGKILL (their shutdowns overlap instead of adding up)."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        process.terminate()
    deadline = time.monotonic() + timeout
    for process in running:
        try:
            process.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


def answers_ok(url: str) -> bool:
    """Whether a GET of ``url`` answers 200 now (within 2 s)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def private_ca(directory: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA of our own and a certificate for 127.0.0.1 it signed, as a private PKI's servers
    have: (ca.crt, <name>.crt, <name>.key) in ``directory``."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name}-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = directory / "ca.crt", directory / f"{name}.crt", directory / f"{name}.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths
