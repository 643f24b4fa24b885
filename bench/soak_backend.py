"""The soak's HTTP backend: the official SDK 2.x test server in a process of its own, so that the
soak can kill it, start it again on the same port, and freeze it.

It is ``tests/fixtures/sdk_servers.make_server("sdk")`` (tools ``add``, ``slow`` with progress,
``ask`` with elicitation, ``touch`` for resource updates; ``resources/subscribe``), served over
Streamable HTTP by hypercorn on trio, without the tests' request recorder (which keeps every
request: an hour of load would grow it without bound).

Run: ``python bench/soak_backend.py --port PORT`` prints ``listening http://127.0.0.1:PORT/mcp``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import hypercorn.trio
import trio
from hypercorn.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.fixtures.sdk_servers import make_server


async def serve(port: int) -> None:
    server, _ = make_server("sdk")
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.loglevel = "WARNING"
    config.accesslog = None
    config.errorlog = None
    app = server.streamable_http_app(streamable_http_path="/mcp")
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(hypercorn.trio.serve, app, config)
        print(f"listening {binds[0]}/mcp", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    trio.run(serve, parser.parse_args().port)


if __name__ == "__main__":
    main()
