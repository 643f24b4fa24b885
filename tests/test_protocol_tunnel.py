"""The tunnel's frame protocol (``vmcp_trio/protocol/tunnel.py``): every frame in every state of
a stream, flow control, the bounds, and random conversations between a relay and an agent that
follow the API (the peer never sees a protocol error)."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmcp_trio.protocol.tunnel import (
    END_STREAM,
    DataReceived,
    FlowControlBlocked,
    FrameType,
    HeadReceived,
    HeadRefused,
    PingReceived,
    PongReceived,
    ProtocolError,
    StreamEnded,
    StreamOpened,
    StreamRefused,
    StreamReset,
    TunnelProtocol,
    WindowOpened,
)

WINDOW = 1024


def frame(kind: int, stream_id: int, payload: bytes = b"") -> bytes:
    return struct.pack(">BI", kind, stream_id) + payload


def pair(**limits: int) -> tuple[TunnelProtocol, TunnelProtocol]:
    options = {"window": WINDOW, "max_payload": 512, "max_streams": 4, **limits}
    return TunnelProtocol("relay", **options), TunnelProtocol("agent", **options)


def opened(relay: TunnelProtocol, agent: TunnelProtocol) -> int:
    stream_id, data = relay.open_stream("POST", "/mcp", "a=1", [("mcp-session-id", "s")])
    assert agent.receive(data) == StreamOpened(stream_id, "POST", "/mcp", "a=1",
                                               [("mcp-session-id", "s")])
    return stream_id


def test_one_whole_exchange_closes_the_stream_on_both_sides() -> None:
    relay, agent = pair()
    sid = opened(relay, agent)
    assert agent.receive(relay.send_data(sid, b"{}")) == DataReceived(sid, b"{}")
    assert agent.receive(relay.send_end(sid)) == StreamEnded(sid)
    assert relay.receive(agent.send_head(sid, 200, [("content-type", "text/event-stream")])) \
        == HeadReceived(sid, 200, [("content-type", "text/event-stream")])
    assert relay.receive(agent.send_data(sid, b"data: 1\n\n")) == DataReceived(sid,
                                                                               b"data: 1\n\n")
    assert relay.receive(agent.send_end(sid)) == StreamEnded(sid)
    assert not relay.streams and not agent.streams



def test_end_stream_makes_a_small_exchange_two_frames_each_way() -> None:
    relay, agent = pair()
    sid, data = relay.open_stream("POST", "/mcp", "", [])
    assert agent.receive(data) == StreamOpened(sid, "POST", "/mcp", "", [])
    assert agent.receive(relay.send_data(sid, b"{}", end=True)) == DataReceived(sid, b"{}", True)
    assert relay.receive(agent.send_head(sid, 200, [])) == HeadReceived(sid, 200, [])
    assert relay.receive(agent.send_data(sid, b"[]", end=True)) == DataReceived(sid, b"[]",
                                                                                 True)
    assert not relay.streams and not agent.streams
    sid, data = relay.open_stream("GET", "/health", "", [], end=True)  # no body, no response body
    assert agent.receive(data) == StreamOpened(sid, "GET", "/health", "", [], True)
    assert relay.receive(agent.send_head(sid, 204, [], end=True)) == HeadReceived(sid, 204, [],
                                                                                  True)
    assert not relay.streams and not agent.streams


# --- every frame in every state ------------------------------------------------------------------

AGENT_STATES = ("never opened", "open", "relay ended", "reset by the agent")
RELAY_STATES = ("never opened", "open, no head", "head received", "agent ended",
                "reset by the relay")


def _agent_in(state: str) -> tuple[TunnelProtocol, TunnelProtocol, int]:
    relay, agent = pair()
    if state == "never opened":
        return relay, agent, 9
    sid = opened(relay, agent)
    if state == "relay ended":
        agent.receive(relay.send_end(sid))
    elif state == "reset by the agent":
        agent.send_reset(sid, "gone")
    return relay, agent, sid


def _relay_in(state: str) -> tuple[TunnelProtocol, TunnelProtocol, int]:
    relay, agent = pair()
    if state == "never opened":
        return relay, agent, 9
    sid = opened(relay, agent)
    if state in ("head received", "agent ended"):
        relay.receive(agent.send_head(sid, 200, []))
    if state == "agent ended":
        relay.receive(agent.send_end(sid))
    elif state == "reset by the relay":
        relay.send_reset(sid, "client left")
    return relay, agent, sid


def _payload(kind: FrameType) -> bytes:
    return {FrameType.OPEN: json.dumps({"method": "GET", "path": "/", "query": "",
                                        "headers": []}).encode(),
            FrameType.HEAD: b'{"status": 200, "headers": []}', FrameType.DATA: b"x",
            FrameType.RESET: b"why", FrameType.WINDOW: struct.pack(">I", 10)}.get(kind, b"")


AGENT_EXPECTED = {
    # frame: the event (or None: ignored, or "error") in each of AGENT_STATES; OPEN is below
    FrameType.HEAD: ("error", "error", "error", None),
    FrameType.DATA: ("error", DataReceived, "error", None),
    FrameType.END: ("error", StreamEnded, "error", None),
    FrameType.RESET: ("error", StreamReset, StreamReset, None),
    FrameType.WINDOW: ("error", WindowOpened, WindowOpened, None),
}
RELAY_EXPECTED = {
    FrameType.OPEN: ("error",) * 5,  # the relay is never sent OPEN
    FrameType.HEAD: ("error", HeadReceived, "error", "error", None),
    FrameType.DATA: ("error", "error", DataReceived, "error", None),
    FrameType.END: ("error", "error", StreamEnded, "error", None),
    FrameType.RESET: ("error", StreamReset, StreamReset, StreamReset, None),
    FrameType.WINDOW: ("error", WindowOpened, WindowOpened, WindowOpened, None),
}


@pytest.mark.parametrize("kind", list(AGENT_EXPECTED))
@pytest.mark.parametrize("index", range(len(AGENT_STATES)), ids=AGENT_STATES)
def test_the_agent_takes_each_frame_in_each_state(kind: FrameType, index: int) -> None:
    _, agent, sid = _agent_in(AGENT_STATES[index])
    expected = AGENT_EXPECTED[kind][index]
    data = frame(kind, sid, _payload(kind))
    if expected == "error":
        with pytest.raises(ProtocolError):
            agent.receive(data)
    elif expected is None:
        assert agent.receive(data) is None
    else:
        assert isinstance(agent.receive(data), expected)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", list(RELAY_EXPECTED))
@pytest.mark.parametrize("index", range(len(RELAY_STATES)), ids=RELAY_STATES)
def test_the_relay_takes_each_frame_in_each_state(kind: FrameType, index: int) -> None:
    relay, _, sid = _relay_in(RELAY_STATES[index])
    expected = RELAY_EXPECTED[kind][index]
    data = frame(kind, sid, _payload(kind))
    if expected == "error":
        with pytest.raises(ProtocolError):
            relay.receive(data)
    elif expected is None:
        assert relay.receive(data) is None
    else:
        assert isinstance(relay.receive(data), expected)  # type: ignore[arg-type]


FLAGGED = (FrameType.OPEN, FrameType.HEAD, FrameType.DATA)
"""The frames END_STREAM may mark; on any other it is a protocol error."""


@pytest.mark.parametrize("kind", [k for k in AGENT_EXPECTED if k is not FrameType.HEAD])
@pytest.mark.parametrize("index", range(len(AGENT_STATES)), ids=AGENT_STATES)
def test_the_agent_takes_end_stream_on_data_only(kind: FrameType, index: int) -> None:
    _, agent, sid = _agent_in(AGENT_STATES[index])
    expected = AGENT_EXPECTED[kind][index] if kind in FLAGGED else "error"
    data = frame(kind | END_STREAM, sid, _payload(kind))
    if expected == "error":
        with pytest.raises(ProtocolError):
            agent.receive(data)
    elif expected is None:
        assert agent.receive(data) is None
    else:
        event = agent.receive(data)
        assert isinstance(event, DataReceived) and event.end_stream
        with pytest.raises(ProtocolError):  # the relay's half ended with it
            agent.receive(frame(FrameType.DATA, sid, b"x"))


@pytest.mark.parametrize("kind", list(RELAY_EXPECTED))
@pytest.mark.parametrize("index", range(len(RELAY_STATES)), ids=RELAY_STATES)
def test_the_relay_takes_end_stream_on_head_and_data_only(kind: FrameType, index: int) -> None:
    relay, _, sid = _relay_in(RELAY_STATES[index])
    expected = RELAY_EXPECTED[kind][index] if kind in FLAGGED else "error"
    data = frame(kind | END_STREAM, sid, _payload(kind))
    if expected == "error":
        with pytest.raises(ProtocolError):
            relay.receive(data)
    elif expected is None:
        assert relay.receive(data) is None
    else:
        event = relay.receive(data)
        assert isinstance(event, HeadReceived | DataReceived) and event.end_stream
        with pytest.raises(ProtocolError):  # the agent's half ended with it
            relay.receive(frame(FrameType.DATA, sid, b"x"))


def test_an_open_with_end_stream_is_a_request_without_a_body() -> None:
    relay, agent = pair()
    sid, data = relay.open_stream("DELETE", "/mcp", "", [], end=True)
    event = agent.receive(data)
    assert isinstance(event, StreamOpened) and event.end_stream
    with pytest.raises(ProtocolError):
        agent.receive(frame(FrameType.DATA, sid, b"x"))
    with pytest.raises(ValueError):
        relay.send_data(sid, b"x")  # its own half ended too

@pytest.mark.parametrize("side", ["relay", "agent"])
def test_pings_are_on_stream_zero_with_eight_bytes(side: str) -> None:
    protocol = TunnelProtocol(side)  # type: ignore[arg-type]
    assert protocol.receive(TunnelProtocol.ping(b"12345678")) == PingReceived(b"12345678")
    assert protocol.receive(TunnelProtocol.pong(b"12345678")) == PongReceived(b"12345678")
    for bad in (frame(FrameType.PING, 1, b"12345678"), frame(FrameType.PING, 0, b"1"),
                frame(FrameType.PONG, 0, b""), frame(FrameType.DATA, 0, b"x"),
                frame(9, 1), b"\x01\x00"):
        with pytest.raises(ProtocolError):
            protocol.receive(bad)


def test_the_first_open_may_take_any_higher_id_but_never_an_old_one() -> None:
    agent = TunnelProtocol("agent")
    assert isinstance(agent.receive(frame(FrameType.OPEN, 5, _payload(FrameType.OPEN))),
                      StreamOpened)
    for reused in (5, 3):
        with pytest.raises(ProtocolError, match="reuses"):
            agent.receive(frame(FrameType.OPEN, reused, _payload(FrameType.OPEN)))


# --- flow control ------------------------------------------------------------------------------

def test_a_sender_waits_for_the_window_and_a_receiver_refuses_past_it() -> None:
    relay, agent = pair()
    sid = opened(relay, agent)
    relay.receive(agent.send_head(sid, 200, []))
    sent = 0
    while agent.sendable(sid):
        chunk = b"x" * agent.sendable(sid)
        assert isinstance(relay.receive(agent.send_data(sid, chunk)), DataReceived)
        sent += len(chunk)
    assert sent == WINDOW
    with pytest.raises(FlowControlBlocked):
        agent.send_data(sid, b"x")
    assert relay.consumed(sid, WINDOW // 2 - 1) is None  # not yet half a window
    grant = relay.consumed(sid, 1)
    assert grant is not None and agent.receive(grant) == WindowOpened(sid, WINDOW // 2)
    assert agent.sendable(sid) == WINDOW // 2
    # A peer that ignores the window is a protocol error.
    relay2, agent2 = pair()
    sid2 = opened(relay2, agent2)
    with pytest.raises(ProtocolError, match="window"):
        for _ in range(3):
            agent2.receive(frame(FrameType.DATA, sid2, b"x" * 512))


def test_windows_and_payloads_are_bounded() -> None:
    relay, agent = pair()
    sid = opened(relay, agent)
    for bad in (struct.pack(">I", 0), struct.pack(">I", 2**31), b"\x00\x01"):
        with pytest.raises(ProtocolError):
            agent.receive(frame(FrameType.WINDOW, sid, bad))
    with pytest.raises(FlowControlBlocked):
        relay.send_data(sid, b"x" * 513)  # over max_payload
    with pytest.raises(ProtocolError):
        agent.receive(frame(FrameType.DATA, sid, b"x" * 513))
    with pytest.raises(ProtocolError):
        agent.receive(frame(FrameType.DATA, sid, b""))


# --- bounds and heads ----------------------------------------------------------------------------

def test_streams_are_bounded_on_both_sides() -> None:
    relay, agent = pair(max_streams=2)
    opened(relay, agent)
    opened(relay, agent)
    with pytest.raises(ValueError, match="2 streams"):
        relay.open_stream("GET", "/", "", [])
    with pytest.raises(ProtocolError, match="2 open streams"):
        agent.receive(frame(FrameType.OPEN, 3, _payload(FrameType.OPEN)))


BAD_HEADS = [
    b"not json", b"[]", b'{"method": "GET"}', b'{"method": "G ET", "path": "/"}',
    b'{"method": "M-SEARCH", "path": "/"}', b'{"method": "' + b"A" * 17 + b'", "path": "/"}',
    b'{"method": "GET", "path": "x"}', b'{"method": "GET", "path": "*"}',
    b'{"method": "GET", "path": "@127.0.0.1:9/x"}', b'{"method": "GET", "path": "/a%0d%0ab"}',
    b'{"method": "GET", "path": "/a#b"}', b'{"method": "GET", "path": "/", "query": 1}',
    b'{"method": "GET", "path": "/", "headers": [["a"]]}',
    b'{"method": "GET", "path": "/", "headers": [["", "v"]]}',
    b'{"method": "GET", "path": "/", "headers": ' + json.dumps([["a", "b"]] * 101).encode()
    + b"}",
]


@pytest.mark.parametrize("head", BAD_HEADS)
def test_a_bad_request_head_refuses_that_stream_alone(head: bytes) -> None:
    """The agent resets the stream of a bad head; the connection and its other streams go on:
    late frames of the refused stream are ignored, the next OPEN is served."""
    relay, agent = pair()
    sid = opened(relay, agent)
    refused = agent.receive(frame(FrameType.OPEN, sid + 1, head))
    assert isinstance(refused, StreamRefused) and refused.stream_id == sid + 1
    assert agent.receive(frame(FrameType.DATA, sid + 1, b"late")) is None
    assert agent.receive(frame(FrameType.END, sid + 1)) is None
    assert agent.receive(relay.send_data(sid, b"{}")) == DataReceived(sid, b"{}")
    relay.send_reset(sid + 0, "done")
    relay._last_id = sid + 1  # what the relay would have numbered the refused one
    opened(relay, agent)


@pytest.mark.parametrize(("method", "path", "headers", "status"), [
    ("M-SEARCH", "/", [], 400), ("A" * 17, "/", [], 400), ("GET", "*", [], 400),
    ("GET", "@127.0.0.1:9/x", [], 400), ("OPTIONS", "x", [], 400), ("GET", "/a%00", [], 400),
    ("GET", "/", [("a", "b")] * 101, 431), ("GET", "/", [("a", "b" * 70_000)], 431),
])
def test_the_relay_opens_no_stream_for_a_head_the_agent_would_refuse(
        method: str, path: str, headers: list[tuple[str, str]], status: int) -> None:
    relay, _ = pair()
    with pytest.raises(HeadRefused) as refused:
        relay.open_stream(method, path, "", headers)
    assert refused.value.status == status and not relay.streams


@pytest.mark.parametrize("head", [b'{"status": 99}', b'{"status": "200"}', b'{"status": true}',
                                  b'{"status": 200, "headers": {}}', b"[200]"])
def test_a_bad_response_head_is_a_protocol_error(head: bytes) -> None:
    relay, agent = pair()
    sid = opened(relay, agent)
    with pytest.raises(ProtocolError):
        relay.receive(frame(FrameType.HEAD, sid, head))


def test_heads_are_bounded_both_ways() -> None:
    relay, agent = pair(max_head_bytes=200)
    with pytest.raises(HeadRefused, match="200 bytes"):
        relay.open_stream("GET", "/", "", [("x", "y" * 300)])
    refused = agent.receive(frame(FrameType.OPEN, 1, b'{"method": "GET", "path": "/'
                                  + b"a" * 300 + b'"}'))
    assert isinstance(refused, StreamRefused) and "200 bytes" in refused.reason
    sid, _ = relay.open_stream("GET", "/", "", [])
    with pytest.raises(ProtocolError, match="200 bytes"):
        relay.receive(frame(FrameType.HEAD, sid, b'{"status": 200, "x": "' + b"a" * 300
                            + b'"}'))


def test_the_api_refuses_what_the_protocol_forbids() -> None:
    relay, agent = pair()
    with pytest.raises(ValueError):
        agent.open_stream("GET", "/", "", [])
    sid = opened(relay, agent)
    with pytest.raises(ValueError):
        relay.send_head(sid, 200, [])  # the relay sends no response heads
    with pytest.raises(ValueError):
        agent.send_data(sid, b"x")  # the agent's body comes after its head
    agent.send_head(sid, 200, [])
    with pytest.raises(ValueError):
        agent.send_head(sid, 200, [])
    agent.send_end(sid)
    with pytest.raises(ValueError):
        agent.send_data(sid, b"x")
    with pytest.raises(KeyError):
        agent.sendable(99)


# --- random conversations ------------------------------------------------------------------------

OPERATIONS = st.lists(st.tuples(st.sampled_from(
    ["open", "relay data", "relay end", "head", "agent data", "agent end", "relay reset",
     "agent reset", "relay consumes", "agent consumes"]), st.integers(0, 3),
    st.integers(1, 700)), max_size=80)


@settings(max_examples=300, deadline=None)
@given(OPERATIONS)
def test_sides_that_follow_the_api_never_break_the_protocol(
        operations: list[tuple[str, int, int]]) -> None:
    """Whatever one side sends through the API, the other takes without a protocol error, and
    both agree on which streams are open once every frame arrived (frames in flight are
    delivered in order, like a WebSocket)."""
    relay, agent = pair()
    ids: list[int] = []
    for name, pick, size in operations:
        sid = ids[pick % len(ids)] if ids else 0
        to_agent: list[bytes] = []
        to_relay: list[bytes] = []
        try:
            end = size % 5 == 0  # sometimes the half ends with the frame (END_STREAM)
            if name == "open":
                sid, data = relay.open_stream("POST", "/mcp", "", [], end=end)
                ids.append(sid)
                to_agent.append(data)
            elif name == "relay data" and sid in relay.streams:
                to_agent.append(relay.send_data(sid, b"x" * min(size, relay.sendable(sid) or 1),
                                                end=end))
            elif name == "relay end" and sid in relay.streams:
                to_agent.append(relay.send_end(sid))
            elif name == "head" and sid in agent.streams:
                to_relay.append(agent.send_head(sid, 200, [], end=end))
            elif name == "agent data" and sid in agent.streams:
                to_relay.append(agent.send_data(sid, b"y" * min(size, agent.sendable(sid) or 1),
                                                end=end))
            elif name == "agent end" and sid in agent.streams:
                to_relay.append(agent.send_end(sid))
            elif name == "relay reset" and sid in relay.streams:
                to_agent.append(relay.send_reset(sid, "client left"))
            elif name == "agent reset" and sid in agent.streams:
                to_relay.append(agent.send_reset(sid, "target failed"))
            elif name == "relay consumes":
                grant = relay.consumed(sid, size)
                to_agent += [grant] if grant else []
            elif name == "agent consumes":
                grant = agent.consumed(sid, size)
                to_relay += [grant] if grant else []
        except (ValueError, FlowControlBlocked):
            continue  # the API said no: nothing was sent
        for data in to_agent:
            agent.receive(data)
        for data in to_relay:
            relay.receive(data)
    assert set(agent.streams) == set(relay.streams)
    assert len(relay.streams) <= 4
