"""One convention for secrets outside the configuration, read the same way by every command:
``VMCP_SECRET_<NAME>`` for a whole secret, ``VMCP_SECRET_<SECRET>__<KEY>`` for one key of a Secret,
whose name in the ``vmcp secret`` store is ``SECRET/KEY``. ``vmcp serve`` resolves a Secret
reference from a Secret document of its configuration, then ``$VMCP_SECRETS_DIR``, then the
variable, then the store: a real ``vmcp serve`` gives a backend a header whose value only the
store holds, and refuses, in one line, a reference found nowhere."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from vmcp_trio.resources.plan import StaticCredentialAuth
from vmcp_trio.secrets import os_keyring
from vmcp_trio.secrets.command import configure_parser, run
from vmcp_trio.secrets.manager import SecretsManager
from vmcp_trio.secrets.names import env_variable, name_of_variable, ref_name

from .fixtures.sdk_servers import make_server, serving
from .gateway_helpers import RawClient
from .helpers import ROOT, free_port, validate
from .serve_helpers import serving as serving_process
from .test_secrets_first_use import fresh_environment, vmcp_secret

API = "toolhive.stacklok.dev/v1beta1"
NS = "dev"
STORED = "only-the-store-holds-this"
OTHER = "another-stored-value"


@pytest.fixture(autouse=True)
def _no_os_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process never touches the OS keyring of the machine running the tests."""
    monkeypatch.setattr(os_keyring, "_real_backend", lambda: None)


def gateway(url: str = "https://mcp.example.com/mcp", *extra: dict[str, Any]
            ) -> list[dict[str, Any]]:
    """A gateway over one URL backend whose outgoing auth injects ``X-Service-Key`` from the
    Secret reference ``{name: api, key: key}``; ``extra`` documents are added."""
    def doc(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": API, "kind": kind, "metadata": {"name": name, "namespace": NS},
                "spec": spec}

    return [
        doc("MCPGroup", "remote", {}),
        doc("MCPExternalAuthConfig", "static", {"type": "headerInjection", "headerInjection": {
            "headerName": "X-Service-Key", "valueSecretRef": {"name": "api", "key": "key"}}}),
        doc("MCPServerEntry", "entry", {"groupRef": {"name": "remote"}, "remoteUrl": url,
                                        "transport": "streamable-http",
                                        "allowPrivateEndpoint": True,
                                        "externalAuthConfigRef": {"name": "static"}}),
        doc("VirtualMCPServer", "gw", {"groupRef": {"name": "remote"},
                                       "incomingAuth": {"type": "anonymous"}}),
        *extra,
    ]


def injected(environ: dict[str, str], *extra: dict[str, Any]) -> tuple[bytes, str]:
    """The header value the gateway would send, and where it came from."""
    result = validate(gateway("https://mcp.example.com/mcp", *extra), environ=environ)
    assert result.ok, result.problems
    [backend] = result.plans[0].backends
    assert isinstance(backend.outgoing, StaticCredentialAuth)
    return backend.outgoing.value.value, backend.outgoing.value.source


# --- one convention ----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "variable"), [
    ("api-key", "VMCP_SECRET_API_KEY"),
    (ref_name("vmcp-redis", "password"), "VMCP_SECRET_VMCP_REDIS__PASSWORD"),
    ("github/token.v2", "VMCP_SECRET_GITHUB__TOKEN_V2"),
])
def test_a_name_and_its_variable(name: str, variable: str) -> None:
    assert env_variable(name) == variable
    assert env_variable(name_of_variable(variable) or "") == variable


def test_vmcp_secret_reads_a_secrets_key_as_serve_does(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "VMCP_SECRET_VMCP_REDIS__PASSWORD": "from-env",
           "VMCP_SECRET_API_KEY": "whole"}
    parser = argparse.ArgumentParser(prog="vmcp secret")
    configure_parser(parser)

    def secret(*argv: str) -> str:
        out = io.StringIO()
        assert run(parser.parse_args(argv), io.StringIO(), out, io.StringIO(), env) == 0
        return out.getvalue()

    assert secret("get", "vmcp-redis/password") == "from-env\n"
    assert secret("get", "api-key") == "whole\n"
    assert secret("list") == ("API_KEY              env (VMCP_SECRET_API_KEY)\n"
                              "VMCP_REDIS/PASSWORD  env (VMCP_SECRET_VMCP_REDIS__PASSWORD)\n")


def test_a_reference_looks_in_the_configuration_the_folder_the_variable_then_the_store(
        tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path / "home"), "VMCP_SECRETS_FILE": str(tmp_path / "s.enc"),
               "VMCP_SECRETS_PASSWORD": "pw"}
    SecretsManager.from_environment(environ).set("api/key", "from-the-store")
    assert injected(environ) == (b"from-the-store", f"encrypted file {tmp_path / 's.enc'}")

    environ["VMCP_SECRET_API__KEY"] = "from-the-variable"
    assert injected(environ) == (b"from-the-variable", "environment variable VMCP_SECRET_API__KEY")

    (tmp_path / "mounted" / "api").mkdir(parents=True)
    (tmp_path / "mounted" / "api" / "key").write_text("from-the-folder")
    environ["VMCP_SECRETS_DIR"] = str(tmp_path / "mounted")
    assert injected(environ)[0] == b"from-the-folder"

    document = {"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "api", "namespace": NS},
                "stringData": {"key": "from-the-document"}}
    assert injected(environ, document)[0] == b"from-the-document"


def test_a_store_that_does_not_open_is_named_with_why_in_the_reference_error(
        tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path / "home"), "VMCP_SECRETS_FILE": str(tmp_path / "s.enc"),
               "VMCP_SECRETS_PASSWORD": "pw"}
    SecretsManager.from_environment(environ).set("api/key", STORED)
    result = validate(gateway(), environ={**environ, "VMCP_SECRETS_PASSWORD": "not-pw-9f3"})
    [problem] = result.errors
    assert problem.path == "spec.headerInjection.valueSecretRef.name"
    assert "the variable VMCP_SECRET_API__KEY" in problem.message
    assert f"the name api/key in the vmcp secret store {tmp_path / 's.enc'}: cannot decrypt" \
        in problem.message
    assert STORED not in problem.message and "not-pw-9f3" not in problem.message


# --- vmcp serve, for real ----------------------------------------------------------------------


async def test_vmcp_serve_gives_a_backend_a_secret_only_the_store_holds(tmp_path: Path) -> None:
    env = fresh_environment(tmp_path)
    assert vmcp_secret(env, "set", "api/key", stdin=STORED)[0] == 0
    server, state = make_server("remote")
    async with serving(server, state) as url:
        with ExitStack() as stack:
            served = await trio.to_thread.run_sync(
                stack.enter_context, serving_process(gateway(url), tmp_path, env=env))
            try:
                client = RawClient(served.url)
                try:
                    with trio.fail_after(30):
                        await client.initialize()
                        called = await client.request("tools/call", {
                            "name": "entry_add", "arguments": {"a": 2, "b": 3}})
                finally:
                    await client.aclose()
                assert called.result["structuredContent"]["total"] == 5
            finally:
                await trio.to_thread.run_sync(stack.close)
    assert state.headers
    assert all(headers.get("x-service-key") == STORED for headers in state.headers)
    assert STORED not in served.log()


def test_vmcp_serve_refuses_a_reference_found_nowhere_in_one_line(tmp_path: Path) -> None:
    env = fresh_environment(tmp_path)
    assert vmcp_secret(env, "set", "other", stdin=OTHER)[0] == 0
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump_all(gateway()))
    run = subprocess.run([sys.executable, "-m", "vmcp_trio", "serve", "--config", str(config),
                          "--port", str(free_port())], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=False)
    assert run.returncode == 1
    [line] = [line for line in (run.stdout + run.stderr).splitlines()
              if line.startswith("error:")]
    store = tmp_path / "xdg" / "vmcp" / "secrets.json.enc"
    assert "spec.headerInjection.valueSecretRef.name: refers to Secret dev/api" in line
    assert "the variable VMCP_SECRET_API__KEY" in line
    assert f"the name api/key in the vmcp secret store {store}" in line
    assert OTHER not in run.stdout + run.stderr and "Traceback" not in run.stderr
