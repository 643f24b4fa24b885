"""Fuzz the tunnel's frame protocol: any sequence of frames, to either side, is taken or refused
with ProtocolError (never another exception), and the side's state stays within its bounds (open
streams, windows).

The input: its first byte picks the side (even: the agent, odd: the relay, which first opens
three streams of its own so that frames about them mean something), then frames, each a 2-byte
big-endian length and that many bytes."""

from __future__ import annotations

from vmcp_trio.protocol.tunnel import MAX_WINDOW, ProtocolError, TunnelProtocol

MAX_STREAMS = 4
WINDOW = 1024


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    side = TunnelProtocol("relay" if data[0] % 2 else "agent", max_streams=MAX_STREAMS,
                          window=WINDOW, max_payload=512, max_head_bytes=2048)
    if side.role == "relay":
        for _ in range(3):
            side.open_stream("GET", "/mcp", "", [])
    rest = data[1:]
    while len(rest) >= 2:
        size = int.from_bytes(rest[:2], "big")
        frame, rest = rest[2:2 + size], rest[2 + size:]
        try:
            side.receive(frame)
        except ProtocolError:
            return
        if len(side.streams) > MAX_STREAMS:
            raise AssertionError(f"{len(side.streams)} streams open")
        for stream_id, stream in side.streams.items():
            if not (0 <= stream.send_window <= MAX_WINDOW
                    and 0 <= stream.receive_window <= MAX_WINDOW):
                raise AssertionError(f"stream {stream_id}: windows {stream.send_window}, "
                                     f"{stream.receive_window}")


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
