"""A VirtualMCPServer's static backends (``spec.config.backends``, ToolHive v0.10+): they join
the group's backends; their rules at their field paths; and a real gateway calling a real
backend listed there, behind a private CA its ``caBundlePath`` names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vmcp_trio.resources.plan import HttpEndpoint, NoOutgoingAuth, StaticCredentialAuth

from .fixtures.sdk_servers import make_server, serving
from .gateway_helpers import RawClient, quickstart_docs, running_gateway
from .helpers import expect_error, matching, private_ca, resource, validate

API = "toolhive.stacklok.dev/v1beta1"


def with_static(*backends: dict[str, Any], **spec: Any) -> list[dict[str, Any]]:
    docs = quickstart_docs()
    gateway = resource(docs, "VirtualMCPServer")
    gateway["spec"]["config"] = {"backends": list(backends)}
    gateway["spec"].update(spec)
    return docs


def static(name: str = "remote", url: str = "https://mcp.example.com/mcp",
           **fields: Any) -> dict[str, Any]:
    return {"name": name, "url": url, "transport": "streamable-http", **fields}


def test_static_backends_join_the_groups() -> None:
    result = validate(with_static(static(metadata={"env": "prod"}),
                                  static("legacy", "http://10.0.0.7:8080/sse", transport="sse")))
    assert result.ok, result.problems
    backends = {b.name: b for b in result.plans[0].backends}
    assert list(backends) == ["clock", "legacy", "notes", "remote"]
    assert backends["remote"].endpoint == HttpEndpoint("https://mcp.example.com/mcp")
    assert backends["legacy"].endpoint == HttpEndpoint("http://10.0.0.7:8080/sse", "sse")
    assert backends["remote"].outgoing == NoOutgoingAuth()


def test_a_static_backend_takes_part_where_a_member_would() -> None:
    """Named in aggregation, timeouts and, with source inline, outgoingAuth.backends (its only
    way to credentials: it has no externalAuthConfigRef of its own)."""
    docs = with_static(static(), outgoingAuth={"source": "inline", "backends": {
        "remote": {"type": "externalAuthConfigRef",
                   "externalAuthConfigRef": {"name": "remote-key"}}}})
    resource(docs, "VirtualMCPServer")["spec"]["config"].update({
        "aggregation": {"tools": [{"workload": "remote", "filter": ["search"]}]},
        "operational": {"timeouts": {"perWorkload": {"remote": "20s"}}}})
    docs += [{"apiVersion": API, "kind": "MCPExternalAuthConfig",
              "metadata": {"name": "remote-key"},
              "spec": {"type": "bearerToken",
                       "bearerToken": {"tokenSecretRef": {"name": "remote", "key": "token"}}}},
             {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "remote"},
              "stringData": {"token": "t0ken"}}]
    result = validate(docs)
    assert result.ok, result.problems
    (remote,) = [b for b in result.plans[0].backends if b.name == "remote"]
    assert isinstance(remote.outgoing, StaticCredentialAuth)
    assert remote.outgoing.header == "authorization"


def test_an_empty_group_with_static_backends_is_no_empty_gateway() -> None:
    docs = [d for d in with_static(static()) if d["kind"] != "MCPServer"]
    result = validate(docs)
    assert result.ok, result.problems
    assert not matching(result, rule="empty-group")
    assert [b.name for b in result.plans[0].backends] == ["remote"]


def test_one_named_like_a_member_is_that_member_at_the_url_listed() -> None:
    """As in ToolHive's static mode (its guide copies the group's backends there): the member
    is reached at the URL listed, with its own settings; a name listed twice is an error."""
    docs = with_static(static("clock", "http://clock.tools.svc:8080/sse", transport="sse"))
    result = validate(docs)
    assert result.ok, result.problems
    backends = {b.name: b.endpoint for b in result.plans[0].backends}
    assert list(backends) == ["clock", "notes"]
    assert backends["clock"] == HttpEndpoint("http://clock.tools.svc:8080/sse", "sse")
    expect_error(validate(with_static(static(), static())), "duplicate-backend",
                 "spec.config.backends[1].name", kind="VirtualMCPServer",
                 contains="'remote' is listed twice")


def test_field_rules(tmp_path: Path) -> None:
    for fields, rule, path, says in [
        ({"transport": "stdio"}, "enum", "transport", "'sse' or 'streamable-http'"),
        ({"type": "container"}, "enum", "type", "'entry' or ''"),
        ({"url": "mcp.example.com"}, "url", "url", "absolute http:// or https:// URL"),
        ({"name": "Remote"}, "dns-name", "name", "DNS subdomain"),
        ({"caBundlePath": "/etc/ca.crt"}, "unused-field", "caBundlePath", "type: entry"),
        ({"type": "entry", "caBundlePath": "ca.crt"}, "ca-bundle", "caBundlePath",
         "absolute path"),
        ({"type": "entry", "caBundlePath": str(tmp_path / "none.crt")}, "ca-bundle",
         "caBundlePath", "cannot be read"),
    ]:
        expect_error(validate(with_static(static(**fields))), rule,
                     f"spec.config.backends[0].{path}", kind="VirtualMCPServer", contains=says)
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate")
    expect_error(validate(with_static(static(type="entry", caBundlePath=str(garbage)))),
                 "ca-bundle", "spec.config.backends[0].caBundlePath",
                 contains="not a file of PEM CA certificates")


async def test_a_real_gateway_calls_a_static_backend_behind_a_private_ca(
        tmp_path: Path) -> None:
    ca, cert, key = private_ca(tmp_path, "remote")
    server, state = make_server("remote")
    async with serving(server, state, tls=(cert, key)) as url:
        docs = with_static(static(url=url, type="entry", caBundlePath=str(ca)))
        async with running_gateway(docs) as (gateway_url, _):
            client = RawClient(gateway_url)
            try:
                await client.initialize()
                names = {t["name"] for t in
                         (await client.request("tools/list")).result["tools"]}
                assert {"remote_add", "clock_echo", "notes_add_note"} <= names, names
                called = await client.request("tools/call", {"name": "remote_add",
                                                             "arguments": {"a": 2, "b": 3}})
                assert called.result["structuredContent"] == {"total": 5, "backend": "remote"}
            finally:
                await client.aclose()
    assert "tools/call" in state.methods
