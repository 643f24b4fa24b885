"""The yardstick: a minimal MCP backend on raw trio + h11, no ASGI, no framework.

It answers what a benchmark client needs (initialize, notifications, tools/list, tools/call)
with fixed results, so its CPU per call is the Python floor for one HTTP exchange carrying one
JSON-RPC request. Everything else in bench/ is measured against it.

Run: ``python bench/floor_backend.py --port 0`` prints ``listening http://127.0.0.1:PORT/mcp``.
"""

from __future__ import annotations

import argparse
import sys

import h11
import orjson
import trio

TOOLS = {"tools": [{"name": "echo", "description": "echo",
                    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]}


def answer(body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    message = orjson.loads(body)
    method = message.get("method")
    if "id" not in message:
        return 202, [], b""
    if method == "initialize":
        result = {"protocolVersion": message["params"].get("protocolVersion", "2025-11-25"),
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "floor", "version": "1"}}
        headers = [(b"mcp-session-id", b"floor-session")]
    elif method == "tools/list":
        result, headers = TOOLS, []
    elif method == "tools/call":
        text = message["params"].get("arguments", {}).get("text", "")
        result, headers = {"content": [{"type": "text", "text": text}]}, []
    else:
        result, headers = {}, []
    return 200, headers, orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})


async def serve_connection(stream: trio.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            body = b""
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    conn.receive_data(data)
                    if not data and conn.their_state is not h11.DONE:
                        return
                    continue
                if isinstance(event, h11.Data):
                    body += bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    return
            status, headers, payload = answer(body) if body else (405, [], b"")
            headers = [(b"content-type", b"application/json"),
                       (b"content-length", str(len(payload)).encode()), *headers]
            out = conn.send(h11.Response(status_code=status, headers=headers))
            out += conn.send(h11.Data(data=payload)) if payload else b""
            out += conn.send(h11.EndOfMessage())
            await stream.send_all(out)
            if conn.our_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except (trio.BrokenResourceError, h11.ProtocolError):
        return
    finally:
        await trio.aclose_forcefully(stream)


async def main(port: int) -> None:
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    bound = listeners[0].socket.getsockname()[1]
    print(f"listening http://127.0.0.1:{bound}/mcp", flush=True)
    await trio.serve_listeners(serve_connection, listeners)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    try:
        trio.run(main, parser.parse_args().port)
    except KeyboardInterrupt:
        sys.exit(0)
