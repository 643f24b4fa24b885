"""The command line as a user runs it: a real subprocess, its output and its exit code."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from .helpers import EXAMPLES, ROOT, example_docs, resource


def vmcp(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vmcp_trio", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


def test_validate_each_example_prints_its_plan() -> None:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        run = vmcp("validate", "--config", str(path))
        assert run.returncode == 0, run.stdout + run.stderr
        assert "valid:" in run.stdout and "VirtualMCPServer " in run.stdout


def test_summary_redacts_every_secret() -> None:
    run = vmcp("validate", "-c", "examples/embedded-auth-server.yaml")
    assert run.returncode == 0
    docs = example_docs("embedded-auth-server.yaml")
    secrets = [v for d in docs if d["kind"] == "Secret"
               for v in {**d.get("stringData", {}), **d.get("data", {})}.values()]
    assert secrets
    for value in secrets:
        assert value.strip() not in run.stdout
        for line in value.splitlines()[1:2]:  # a line from inside the PEM key
            assert line.strip() not in run.stdout
    assert "<redacted>" in run.stdout
    assert "tokenExchange at https://sts.example.com/oauth2/token" in run.stdout
    assert "upstreamInject of provider github" in run.stdout


def test_problems_exit_1_with_file_line_document_resource_and_path(tmp_path: Path) -> None:
    docs = example_docs("oidc-inline.yaml")
    gateway = resource(docs, "VirtualMCPServer")
    gateway["spec"]["incomingAuth"]["oidcConfig"]["inline"]["issuer"] = "http://idp.local"
    target = tmp_path / "broken.yaml"
    target.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    run = vmcp("validate", "--config", str(target))
    assert run.returncode == 1
    line = next(ln for ln in run.stdout.splitlines() if "[https]" in ln)
    assert line.startswith(f"error: {target}:")
    assert ": document 6 (VirtualMCPServer platform/engineering-gateway): " in line
    assert "spec.incomingAuth.oidcConfig.inline.issuer: must use https" in line
    assert "invalid: 1 error(s)" in run.stdout


def test_broken_yaml_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    target = tmp_path / "bad.yaml"
    target.write_text("kind: MCPGroup\nmetadata: {name: [oops\n")
    run = vmcp("validate", "-c", str(target))
    assert run.returncode == 1
    assert "Traceback" not in run.stdout + run.stderr
    assert f"{target}:3:1: " in run.stdout and "[yaml-syntax]" in run.stdout


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert vmcp("validate").returncode == 2
    missing = vmcp("validate", "-c", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr
    assert vmcp("validate", "-c", "examples", "--bogus").returncode == 2
    template = vmcp("validate", "-c", "examples", "--backend-url-template", "http://{host}")
    assert template.returncode == 2 and "unknown placeholders" in template.stderr
    assert vmcp("no-such-command").returncode == 2


def test_name_picks_one_of_several_gateways() -> None:
    run = vmcp("validate", "-c", "examples", "--name", "support-gateway")
    assert run.returncode == 0
    assert "VirtualMCPServer default/support-gateway" in run.stdout
    assert "dev-gateway" not in run.stdout.split("valid:")[1]
    missing = vmcp("validate", "-c", "examples", "--name", "nobody")
    assert missing.returncode == 1 and "no VirtualMCPServer named 'nobody'" in missing.stdout


def test_json_output() -> None:
    run = vmcp("validate", "-c", "examples", "-o", "json")
    assert run.returncode == 0
    report = json.loads(run.stdout)
    assert report["valid"] is True
    assert set(report["virtualMCPServers"]) == {
        "ci/automation-gateway", "dev/dev-gateway", "default/quickstart",
        "default/support-gateway", "platform/engineering-gateway", "tools/tools-gateway"}
    assert {p["rule"] for p in report["problems"]} == {"anonymous"}


def test_svc_and_vmcp_scripts_are_the_same_program() -> None:
    bindir = Path(sys.executable).parent
    for script in ("vmcp", "svc"):
        run = subprocess.run([str(bindir / script), "--version"], capture_output=True,
                             text=True, timeout=60, check=False)
        assert run.returncode == 0 and run.stdout.startswith("vmcp 0.")


def test_keys_generate_secret_document_validates(tmp_path: Path) -> None:
    run = vmcp("keys", "generate", "--name", "gateway-auth-keys", "--namespace", "tools",
               "--key-type", "ed25519")
    assert run.returncode == 0
    (tmp_path / "keys.yaml").write_text(run.stdout)
    docs = [d for d in example_docs("embedded-auth-server.yaml")
            if d["metadata"]["name"] != "gateway-auth-keys"]
    (tmp_path / "rest.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    check = vmcp("validate", "-c", str(tmp_path))
    assert check.returncode == 0, check.stdout


def test_keys_generate_files_are_private_and_never_overwritten(tmp_path: Path) -> None:
    run = vmcp("keys", "generate", "--key-type", "rsa", "--rsa-bits", "2048",
               "--output-dir", str(tmp_path))
    assert run.returncode == 0
    key = tmp_path / "signing-key.pem"
    assert key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert os.stat(key).st_mode & 0o777 == 0o600
    assert len((tmp_path / "hmac-secret").read_bytes()) >= 32
    again = vmcp("keys", "generate", "--output-dir", str(tmp_path))
    assert again.returncode == 2 and "not overwriting" in again.stderr


def test_operator_errors_of_serve_are_one_line_and_exit_2(tmp_path: Path) -> None:
    """Never a traceback: the line names the port, the address or the file; nothing was
    started (no backend process runs for a server that cannot listen)."""
    quickstart = str(EXAMPLES / "quickstart.yaml")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cases = [
            (["--port", str(port)], f"vmcp: cannot listen on 127.0.0.1:{port}: Address "
                                    "already in use"),
            (["--host", "192.0.2.1", "--port", "0", "--allow-anonymous-on-network"],
             "vmcp: cannot listen on 192.0.2.1:0: Cannot assign requested address"),
            (["--host", "192.0.2.1"], "vmcp: VirtualMCPServer default/quickstart has "
                                      "anonymous incoming auth and --host 192.0.2.1 is not a "
                                      "loopback address"),
            (["--tls-cert", str(tmp_path / "none.pem"), "--tls-key", quickstart],
             f"vmcp: --tls-cert {tmp_path / 'none.pem'} / --tls-key {quickstart}: cannot load "
             "the certificate and key"),
            (["-c", str(tmp_path / "nope.yaml")], "no such file or folder"),
            (["--tls-cert", quickstart], "--tls-cert and --tls-key go together"),
            (["--port", "70000"], "--port must be between 0 and 65535"),
            (["--shutdown-grace", "soon"], "--shutdown-grace: 'soon'"),
        ]
        with ThreadPoolExecutor(max_workers=4) as pool:  # each refuses before it starts anything
            runs = list(pool.map(lambda flags: vmcp("serve", "-c", quickstart, *flags),
                                 [flags for flags, _ in cases]))
        for (flags, line), run in zip(cases, runs, strict=True):
            assert run.returncode == 2, (flags, run.stderr)
            assert line in run.stderr, (flags, run.stderr)
            assert "Traceback" not in run.stderr and "MCP endpoint" not in run.stdout


def test_serve_flags_from_the_environment(tmp_path: Path) -> None:
    """VMCP_<FLAG> for every serve flag (upper case, dashes as underscores); the command line
    wins; a bad value names the variable."""

    def serve(*args: str, **environ: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "vmcp_trio", "serve", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, check=False,
                              env={**os.environ, **environ})

    quickstart = str(EXAMPLES / "quickstart.yaml")
    bad = serve(VMCP_CONFIG=quickstart, VMCP_PORT="many")
    assert bad.returncode == 2 and "VMCP_PORT: 'many' is not a valid value" in bad.stderr
    switch = serve(VMCP_CONFIG=quickstart, VMCP_TRUST_FORWARDED_HEADERS="perhaps")
    assert switch.returncode == 2 and "VMCP_TRUST_FORWARDED_HEADERS" in switch.stderr
    # The environment is read: a certificate without its key is refused ...
    alone = serve(VMCP_CONFIG=quickstart, VMCP_TLS_CERT=quickstart)
    assert alone.returncode == 2 and "--tls-cert and --tls-key go together" in alone.stderr
    # ... and the command line wins over it.
    wins = serve("--port", "70000", VMCP_CONFIG=quickstart, VMCP_PORT="4483")
    assert wins.returncode == 2 and "--port must be between 0 and 65535" in wins.stderr
    lists = serve(VMCP_CONFIG=f"{tmp_path / 'a.yaml'},{quickstart}")
    assert lists.returncode == 2 and "a.yaml: no such file or folder" in lists.stderr
