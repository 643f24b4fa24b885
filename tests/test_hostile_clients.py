"""Hostile clients against a running ``vmcp serve`` (a real process; anonymous incoming auth, and
at the end with the embedded authorization server).

Each case sends what an attacker (or a broken client) would, checks that the answer is the right
refusal, naming the problem without echoing the payload, and then that the process is alive,
``/health`` is 200, a well-behaved client's call still works, and nothing was logged as a
traceback (:meth:`Served.assert_serving`). Every one of these inputs ended the process before:
deep JSON, malformed 2026-07-28 retries, HTTP/2 CONNECT without ``:path``, odd ``Mcp-Name``
values, racing listen streams, aborted uploads. The families a hostile client tries next are
here too: wrong types for every JSON-RPC field, colliding ids, answers to unknown ids, slow
headers, stalled bodies, floods of HTTP/2 streams, and the per-client bounds.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import h2.config
import h2.connection
import h2.events
import orjson
import pytest
import trio

from .authserver_helpers import (
    Stack,
    as_docs,
    authorize_url,
    call,
    pkce,
    register,
    tokens,
)
from .fixtures.idp import Idp
from .gateway_helpers import (
    RawClient,
    StatelessClient,
    post_from,
    quickstart_docs,
    running_gateway,
)
from .serve_helpers import Served, serving

MARKER = "PAYLOAD-MARKER-7f3a"
"""Put in hostile payloads: an answer must never echo it."""


def deep(levels: int) -> bytes:
    return b"[" * levels + orjson.dumps(MARKER) + b"]" * levels


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(quickstart_docs(), tmp_path_factory.mktemp("hostile"),
                 "--body-timeout", "1", "--idle-timeout", "2") as running:
        yield running


@pytest.fixture
async def session(gateway: Served) -> Any:
    client = RawClient(gateway.url)
    await client.initialize({"elicitation": {}, "sampling": {}})
    yield client
    await client.aclose()


def request_body(method: str, params_json: bytes, request_id: int = 7) -> bytes:
    return (b'{"jsonrpc": "2.0", "id": ' + str(request_id).encode() + b', "method": "'
            + method.encode() + b'", "params": ' + params_json + b"}")


def assert_no_echo(reply: Any) -> None:
    text = orjson.dumps(reply.body if reply.body is not None else reply.messages).decode()
    assert MARKER not in text and len(text) < 2000


# --- deep JSON -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "params"), [
    ("tools/call", b'{"name": "clock_echo", "arguments": {"message": DEEP}}'),
    ("prompts/get", b'{"name": "notes_summarize", "arguments": {"x": DEEP}}'),
    ("resources/read", b'{"uri": "notes://index", "extra": DEEP}'),
    ("completion/complete", b'{"ref": {"type": "ref/prompt", "name": DEEP}, '
                            b'"argument": {"name": "a", "value": ""}}'),
    ("logging/setLevel", b'{"level": "info", "x": DEEP}'),
    ("ping", b'{"_meta": {"progressToken": DEEP}}'),
])
async def test_json_too_deep_to_send_on_is_refused(gateway: Served, session: RawClient,
                                                   method: str, params: bytes) -> None:
    """orjson reads 1,024 levels but writes 254: a 300-deep value re-encoded for the backend
    used to end the process."""
    reply = await session.post(None, raw=request_body(method, params.replace(b"DEEP",
                                                                             deep(300))))
    assert reply.status == 400
    error = reply.body["error"]
    assert reply.body["id"] == 7 and error["code"] == -32600
    assert "nested deeper than 128 levels" in error["message"]
    assert_no_echo(reply)
    await gateway.assert_serving()


async def test_a_deep_batch_member_is_refused_alone(gateway: Served) -> None:
    client = RawClient(gateway.url, version="2025-03-26")
    await client.initialize()
    good = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    bad = request_body("tools/call", b'{"name": "clock_echo", "arguments": {"m": '
                       + deep(300) + b"}}", 2)
    reply = await client.post(None, raw=b"[" + good + b"," + bad + b"]")
    answers = {m["id"]: m for m in reply.body}
    assert reply.status == 200 and answers[1]["result"] == {}
    assert answers[2]["error"]["code"] == -32600
    assert_no_echo(reply)
    too_many = b"[" + b",".join([good] * 65) + b"]"
    reply = await client.post(None, raw=too_many)
    assert reply.status == 400
    assert "at most 64 messages; this one holds 65" in reply.body["error"]["message"]
    await client.aclose()
    await gateway.assert_serving()


async def test_a_deep_answer_to_the_gateway_s_question_is_refused(gateway: Served,
                                                                  session: RawClient) -> None:
    """clock_ask_user asks the client (elicitation/create, on the call's stream); a 300-deep
    answer is refused, and the real answer still completes the call (read by resuming the
    call's stream)."""
    opened = await session.request("tools/call", {
        "name": "clock_ask_user", "arguments": {"question": "name?"}}, stop_after=1)
    question = opened.messages[0]
    assert question["method"] == "elicitation/create"
    bad = b'{"jsonrpc": "2.0", "id": ' + orjson.dumps(question["id"]) + \
        b', "result": {"action": "accept", "content": ' + deep(300) + b"}}"
    refused = await session.post(None, raw=bad)
    assert refused.status == 400 and refused.body["error"]["code"] == -32600
    assert_no_echo(refused)
    fine = await session.post({"jsonrpc": "2.0", "id": question["id"], "result": {
        "action": "accept", "content": {"answer": "Ada"}}})
    assert fine.status == 202
    rest = await session.get(last_event_id=opened.events[-1].id)
    assert rest.messages[-1]["result"]["content"][0]["text"] == "Ada"
    await gateway.assert_serving()


# --- malformed JSON-RPC, every field ----------------------------------------------------------

@pytest.mark.parametrize(("body", "code", "fragment"), [
    (b"{not json", -32700, "not valid JSON"),
    (b'"a string"', -32600, "must be a JSON object"),
    (b"[]", -32600, "empty JSON array"),
    (b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}', -32600, 'field "jsonrpc" must be "2.0"'),
    (b'{"jsonrpc": 2, "id": 1, "method": "ping"}', -32600, 'field "jsonrpc" must be "2.0"'),
    (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', -32600, 'field "id" must be'),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', -32600, 'field "id" must be'),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', -32600, 'field "id" must be'),
    (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', -32600, 'field "id" must be'),
    (b'{"jsonrpc": "2.0", "id": 1, "method": 5}', -32600, 'field "method" must be'),
    (b'{"jsonrpc": "2.0", "id": 1, "method": ""}', -32600, 'field "method" must be'),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}', -32600,
     'field "params" must be an object'),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": "x"}', -32600,
     'field "params" must be an object'),
    (b'{"jsonrpc": "2.0", "id": 1, "result": "x"}', -32600, 'field "result" must be an object'),
    (b'{"jsonrpc": "2.0", "id": 1, "error": {"code": "1", "message": "m"}}', -32600,
     'field "error" must be an object with integer "code"'),
    (b'{"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "m"}}',
     -32600, 'exactly one of "result" or "error"'),
    (b'{"jsonrpc": "2.0"}', -32600, 'needs "method"'),
])
async def test_every_malformed_field_gets_a_named_refusal(gateway: Served, session: RawClient,
                                                          body: bytes, code: int,
                                                          fragment: str) -> None:
    reply = await session.post(None, raw=body)
    assert reply.status == 400
    assert reply.body["error"]["code"] == code and fragment in reply.body["error"]["message"]
    await gateway.assert_serving()


@pytest.mark.parametrize(("method", "params", "fragment"), [
    ("tools/call", {"name": 5}, "params.name must be a string"),
    ("tools/call", {"name": "no_such_tool"}, "Unknown tool"),
    ("resources/read", {"uri": ["x"]}, "params.uri must be a string"),
    ("completion/complete", {"ref": "x"}, "params.ref must be an object"),
    ("completion/complete", {"ref": {"type": "ref/x"}}, "params.ref.type must be"),
    ("logging/setLevel", {"level": ["debug"]}, "params.level must be one of"),
    ("logging/setLevel", {"level": {"a": 1}}, "params.level must be one of"),
    ("no/such/method", {}, "Method not found"),
])
async def test_wrong_types_in_params_are_named(gateway: Served, session: RawClient,
                                               method: str, params: dict[str, Any],
                                               fragment: str) -> None:
    reply = await session.request(method, params)
    error = reply.messages[-1]["error"]
    assert fragment in error["message"]
    await gateway.assert_serving()


async def test_colliding_ids_and_answers_to_unknown_ids(gateway: Served,
                                                        session: RawClient) -> None:
    """Two requests in flight with one id each get their own answer; answers to requests the
    gateway never sent are ignored (202)."""
    answers: dict[str, Any] = {}

    async def call(tool: str, arguments: dict[str, Any]) -> None:
        answers[tool] = await session.post({"jsonrpc": "2.0", "id": 42, "method": "tools/call",
                                            "params": {"name": tool, "arguments": arguments}})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, "clock_countdown", {"steps": 2, "delay_ms": 200})
        await trio.sleep(0.05)
        nursery.start_soon(call, "clock_echo", {"message": "fast"})
    assert answers["clock_echo"].result["content"][0]["text"] == "fast"
    assert answers["clock_countdown"].result["content"][0]["text"] == "done after 2 steps"
    for unknown in ({"jsonrpc": "2.0", "id": "vmcp-999", "result": {}},
                    {"jsonrpc": "2.0", "id": 123456, "error": {"code": 1, "message": "m"}}):
        assert (await session.post(unknown)).status == 202
    await gateway.assert_serving()


# --- 2026-07-28 --------------------------------------------------------------------------------

@pytest.mark.parametrize("state", ["é.é", "abc.déf", "x" * 5000, "a.b.c", "\u2028.\u2029"])
async def test_a_forged_request_state_is_invalid_params(gateway: Served, state: str) -> None:
    client = StatelessClient(gateway.url)
    reply = await client.call("clock_ask_user", {"question": "q"}, requestState=state,
                              inputResponses={})
    error = reply.messages[-1]["error"]
    assert error["code"] == -32602 and "params.requestState is invalid" in error["message"]
    await client.http.aclose()
    await gateway.assert_serving()


@pytest.mark.parametrize(("answer", "field"), [
    ({"error": {"code": "1", "message": "m"}}, "error.code must be an integer"),
    ({"error": {"code": None, "message": "m"}}, "error.code must be an integer"),
    ({"error": {"code": 1, "message": None}}, "error.message must be a string"),
    ({"error": "no"}, "error must be an object"),
    ("text", "must be a result object"),
])
async def test_malformed_input_responses_are_named(gateway: Served, answer: Any,
                                                   field: str) -> None:
    client = StatelessClient(gateway.url)
    first = (await client.call("clock_ask_user", {"question": "name?"})).result
    assert first["resultType"] == "input_required"
    (key, _), = first["inputRequests"].items()
    reply = await client.call("clock_ask_user", {"question": "name?"},
                              inputResponses={key: answer}, requestState=first["requestState"])
    error = reply.messages[-1]["error"]
    assert error["code"] == -32602 and f"params.inputResponses['{key}']" in error["message"]
    assert field in error["message"]
    done = await client.call("clock_ask_user", {"question": "name?"}, inputResponses={
        key: {"action": "accept", "content": {"answer": "Ada"}}},
        requestState=first["requestState"])
    assert done.result["content"][0]["text"] == "Ada"
    await client.http.aclose()
    await gateway.assert_serving()


async def test_a_non_ascii_base64_mcp_name_is_a_header_mismatch(gateway: Served) -> None:
    reply = await raw_http(gateway, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Content-Type: application/json\r\n"
                           b"Accept: application/json, text/event-stream\r\n"
                           b"MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\n"
                           b"Mcp-Name: =?base64?\xe9?=\r\n", stateless_call())
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    assert b"-32020" in reply
    await gateway.assert_serving()


def stateless_call() -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "clock_echo", "arguments": {"message": "x"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}})


async def test_listen_streams_racing_on_one_uri(gateway: Served) -> None:
    """Six listen streams subscribing to one URI at once, then closing: the backend keeps its
    subscription while any remains, and nothing races (this raised KeyError)."""
    clients = [StatelessClient(gateway.url) for _ in range(6)]

    async def listen(client: StatelessClient) -> None:
        reply = await client.post("subscriptions/listen", {"notifications": {
            "resourceSubscriptions": ["notes://index"]}}, stop_after=1)
        ack = reply.messages[0]
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["notifications"]["resourceSubscriptions"] == ["notes://index"]

    async with trio.open_nursery() as nursery:
        for client in clients:
            nursery.start_soon(listen, client)
    for client in clients:
        await client.http.aclose()
    await trio.sleep(0.3)
    await gateway.assert_serving()


# --- the transport ------------------------------------------------------------------------------

async def raw_http(gateway: Served, head: bytes, body: bytes = b"", *,
                   content_length: int | None = None, linger: float = 5) -> bytes:
    """Send a hand-made HTTP/1.1 request and read what comes back until the server closes the
    connection or ``linger`` seconds pass."""
    port = int(gateway.base.rsplit(":", 1)[1])
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    length = len(body) if content_length is None else content_length
    await stream.send_all(head + b"Content-Length: " + str(length).encode() + b"\r\n\r\n"
                          + body)
    received = b""
    with trio.move_on_after(linger):
        while chunk := await stream.receive_some(65536):
            received += chunk
            if b"\r\n\r\n" in received and content_length is None and _complete(received):
                break
    await stream.aclose()
    return received


def _complete(response: bytes) -> bool:
    head, _, body = response.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


POST_HEAD = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             b"Accept: application/json, text/event-stream\r\n")


@pytest.mark.parametrize("target", [b"@127.0.0.1:1/mcp", b"%40127.0.0.1/mcp", b"*",
                                    b"http://127.0.0.1/mcp", b"/mcp%0d%0aX:%201", b"/mcp#x"])
async def test_a_request_target_that_is_not_origin_form_is_400(gateway: Served,
                                                               target: bytes) -> None:
    reply = await raw_http(gateway, b"POST " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Content-Type: application/json\r\n", b"{}")
    assert reply.startswith(b"HTTP/1.1 400") and b"request-target" in reply, reply[:200]
    await gateway.assert_serving()


async def test_a_stalled_body_gets_408_and_the_connection_closes(gateway: Served) -> None:
    """--body-timeout 1: a body that stops arriving frees its connection."""
    started = trio.current_time()
    reply = await raw_http(gateway, POST_HEAD, b'{"jsonrpc": ', content_length=5000)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"connection: close" in reply.lower()
    assert b"did not arrive within 1s" in reply
    assert trio.current_time() - started < 4
    await gateway.assert_serving()


async def test_slow_headers_are_cut_off(gateway: Served) -> None:
    """--idle-timeout 2: a connection whose request headers never finish is closed."""
    port = int(gateway.base.rsplit(":", 1)[1])
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    with trio.fail_after(6):
        while await stream.receive_some(1024):
            pass
    await stream.aclose()
    await gateway.assert_serving()


async def test_a_refusal_before_the_body_closes_the_connection(gateway: Served) -> None:
    reply = await raw_http(gateway, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Content-Type: text/plain\r\nAccept: application/json\r\n",
                           b"x" * 100)
    assert reply.startswith(b"HTTP/1.1 415") and b"connection: close" in reply.lower()
    await gateway.assert_serving()


async def test_aborted_uploads_are_a_line_each_not_a_traceback(gateway: Served) -> None:
    before = len(gateway.log())
    port = int(gateway.base.rsplit(":", 1)[1])
    for _ in range(50):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(POST_HEAD + b"Content-Length: 100000\r\n\r\n" + b"x" * 1000)
        await stream.aclose()
    await trio.sleep(0.5)
    assert len(gateway.log()) - before < 20_000
    await gateway.assert_serving()


def h2_connection() -> tuple[socket.socket, h2.connection.H2Connection]:
    return socket.socket(), h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False))


async def test_http2_connect_without_path_closes_only_that_connection(gateway: Served) -> None:
    """One HEADERS frame used to end the whole server (hypercorn's h2 protocol raised
    UnboundLocalError)."""
    port = int(gateway.base.rsplit(":", 1)[1])

    def attack() -> None:
        sock, conn = h2_connection()
        sock.settimeout(5)
        sock.connect(("127.0.0.1", port))
        conn.initiate_connection()
        conn.send_headers(1, [(":method", "CONNECT"), (":authority", "127.0.0.1")],
                          end_stream=True)
        sock.sendall(conn.data_to_send())
        while sock.recv(65536):
            pass
        sock.close()

    await trio.to_thread.run_sync(attack)
    await gateway.assert_serving()
    assert "HTTP connection from 127.0.0.1" in gateway.log()


async def test_a_flood_of_reset_http2_streams(gateway: Served) -> None:
    """2,000 streams opened and reset at once (the "rapid reset" pattern): the server stays
    up and the log stays small."""
    port = int(gateway.base.rsplit(":", 1)[1])
    before = len(gateway.log())

    def flood() -> None:
        sock, conn = h2_connection()
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        conn.initiate_connection()
        headers = [(":method", "POST"), (":path", "/mcp"), (":scheme", "http"),
                   (":authority", "127.0.0.1"), ("content-type", "application/json"),
                   ("accept", "application/json, text/event-stream")]
        for stream_id in range(1, 4001, 2):
            conn.send_headers(stream_id, headers)
            conn.reset_stream(stream_id)
        try:
            sock.sendall(conn.data_to_send())
            sock.settimeout(1)  # whatever the server answers, until it goes quiet
            while sock.recv(65536):
                pass
        except OSError:
            pass
        sock.close()

    await trio.to_thread.run_sync(flood)
    await trio.sleep(0.5)
    assert len(gateway.log()) - before < 200_000
    await gateway.assert_serving()


# --- per-client bounds (a gateway of their own: tight limits) ----------------------------------

@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(quickstart_docs(), tmp_path_factory.mktemp("tight"),
                 "--max-sessions-per-client", "3", "--max-requests-per-session", "2") as running:
        yield running


async def test_one_client_cannot_fill_the_session_table(tight: Served) -> None:
    """Past --max-sessions-per-client its longest-idle session makes room (a client that
    never says DELETE locks out neither itself nor anyone)."""
    clients = [RawClient(tight.url) for _ in range(4)]
    for client in clients:
        assert (await client.initialize()).status == 200
    assert (await clients[0].request("ping")).status == 404
    for client in clients[1:]:
        assert (await client.request("ping")).status == 200
    for client in clients:
        await client.aclose()


async def test_a_session_s_requests_at_work_are_bounded(tight: Served) -> None:
    client = RawClient(tight.url)
    await client.initialize()
    replies: list[Any] = []

    async def slow() -> None:
        replies.append(await client.request("tools/call", {
            "name": "clock_countdown", "arguments": {"steps": 2, "delay_ms": 400}}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slow)
        nursery.start_soon(slow)
        await trio.sleep(0.2)
        third = await client.request("ping")
        assert third.status == 429 and third.headers["retry-after"] == "1"
        assert third.body["error"]["code"] == -32000
        assert "requests in flight" in third.body["error"]["message"]
    assert all("result" in reply.messages[-1] for reply in replies)
    assert (await client.request("ping")).status == 200
    await client.aclose()


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}


async def test_one_client_cannot_take_every_session_of_the_gateway() -> None:
    """--max-sessions 6, one client holding all six: each newcomer is served, the greedy
    client giving up its longest-idle sessions, until the table is shared out evenly; then a
    newcomer is refused (503) only because every client holds its share."""
    async with running_gateway(quickstart_docs(), max_sessions=6) as (url, process):
        gateway = process.gateway
        greedy = [(await post_from(url, "127.0.0.2", INITIALIZE))[1]["mcp-session-id"]
                  for _ in range(6)]
        newcomers = []
        for n in range(3, 6):  # three others arrive: each gets a session
            status, headers = await post_from(url, f"127.0.0.{n}", INITIALIZE)
            assert status == 200
            newcomers.append((f"127.0.0.{n}", headers["mcp-session-id"]))
        alive = [(await post_from(url, "127.0.0.2", PING, s))[0] for s in greedy]
        assert alive == [404, 404, 404, 200, 200, 200]  # its oldest three made room
        for source, session in newcomers:
            assert (await post_from(url, source, PING, session))[0] == 200
        status, _ = await post_from(url, "127.0.0.6", INITIALIZE)  # 3 + 1 + 1 + 1: room
        assert (status, gateway.held()) == (200, 6)
        status, _ = await post_from(url, "127.0.0.7", INITIALIZE)  # 2 + 1 x 4: room
        assert status == 200
        status, headers = await post_from(url, "127.0.0.8", INITIALIZE)  # 1 each: full
        assert status == 503 and headers.get("retry-after")
        assert gateway.metrics.registry.get_sample_value("vmcp_sessions_evicted_total") == 5


# --- with the embedded authorization server ----------------------------------------------------

@pytest.fixture(scope="module")
def guarded(upstreams: tuple[int, Idp, Idp],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Stack]]:
    port, corp, hub = upstreams
    issuer = f"http://127.0.0.1:{port}"
    with serving(as_docs(issuer, corp, hub), tmp_path_factory.mktemp("guarded"),
                 port=port) as running:
        yield running, Stack(issuer, running.url, corp, hub)


_TOKENS: dict[str, str] = {}


async def access_token(stack: Stack) -> str:
    """One login per module: a well-behaved client's token."""
    if stack.issuer not in _TOKENS:
        _, answer, _ = await tokens(stack)
        _TOKENS[stack.issuer] = answer["access_token"]
    return _TOKENS[stack.issuer]


@pytest.mark.parametrize(("authorization", "status"), [
    ("Bearer " + "a" * 20_000, 431),
    ("Bearer not.a.jwt", 401),
    ("Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.", 401),
    ("Bearer " + "é", 400),
    ("Basic dXNlcjpwYXNz", 400),
    ("Bearer a b", 400),
])
async def test_broken_and_forged_tokens(guarded: tuple[Served, Stack], authorization: str,
                                        status: int) -> None:
    running, stack = guarded
    token = await access_token(stack)
    client = RawClient(running.url)
    reply = await client.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x"}}},
        headers=[(k, v) for k, v in client.headers() if k != "authorization"]
        + [("authorization", authorization.encode("utf-8").decode("latin-1"))])
    assert reply.status == status
    assert "a" * 200 not in orjson.dumps(reply.body).decode()
    await client.aclose()
    await running.assert_serving(token=token)


@pytest.mark.parametrize(("raw", "fragment"), [
    (b"{not json", "not valid JSON"),
    (b'{"redirect_uris": ["http://127.0.0.1:9/cb"], "x": ' + deep(300) + b"}", None),
    (b'{"redirect_uris": ' + deep(300) + b"}", "redirect_uris"),
    (b'{"redirect_uris": ["http://127.0.0.1:9/cb"], "scope": "' + b"s " * 2500 + b'"}',
     "scope is longer than 4000 characters"),
    (b'{"redirect_uris": ["http://127.0.0.1:9/cb"], "pad": "' + b"x" * 70_000 + b'"}',
     "larger than"),
])
async def test_hostile_registrations(guarded: tuple[Served, Stack], raw: bytes,
                                     fragment: str | None) -> None:
    running, stack = guarded
    token = await access_token(stack)
    status, _, answer = await call(stack, "POST", "/oauth/register", raw=raw)
    if fragment is None:
        assert status == 201  # unknown fields are ignored, however deep
    else:
        assert status == 400 and fragment in answer["error_description"]
    assert MARKER not in orjson.dumps(answer).decode()
    await running.assert_serving(token=token)


async def test_a_huge_state_is_refused_and_logins_per_address_are_bounded(
        guarded: tuple[Served, Stack]) -> None:
    running, stack = guarded
    started = time.monotonic()
    token = await access_token(stack)
    client_id = await register(stack)
    _, challenge = pkce()
    url = authorize_url(stack, client_id, challenge, state="s" * 5000)
    status, _, page = await call(stack, "GET", url.removeprefix(stack.issuer))
    assert status == 400 and "state is longer than 1024 characters" in page
    statuses, waits = [], []
    for _ in range(40):
        status, headers, _ = await call(stack, "GET", authorize_url(
            stack, client_id, challenge).removeprefix(stack.issuer))
        statuses.append(status)
        if status == 429:
            waits.append(int(headers["retry-after"]))
    # 30 a minute per address: the burst, plus one token for every 2 s the test has taken
    refilled = int((time.monotonic() - started) / 2.0) + 1
    assert statuses[:20] == [302] * 20 and statuses.count(302) <= 30 + refilled
    assert len(waits) >= 10 - refilled and all(1 <= wait <= 3 for wait in waits)
    await running.assert_serving(token=token)
