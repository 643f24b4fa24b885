"""The "clock" example MCP server: stdio, standard library only.

A backend for the gateway's quickstart and for its tests, with one tool per protocol feature
worth exercising through a gateway:

* ``now``, ``echo``, ``add`` (structured output), ``fail`` (``isError``): plain calls;
* ``countdown``: ``notifications/progress`` (when the call carries ``_meta.progressToken``),
  ``notifications/message`` at info level, and cancellation;
* ``ask_user``, ``summarize``, ``list_roots``: server-to-client requests (elicitation, sampling,
  roots), only made if the client declared the capability at initialize;
* ``crash``: the process exits at once with status 3, without answering (for fault tests).

Run it as ``python3 examples/servers/clock_server.py``; it speaks newline-delimited JSON-RPC on
stdin/stdout (see ``mcp_stdio.py``).
"""

from __future__ import annotations

import datetime
import math
import os
import sys
from pathlib import Path
from typing import Any

# The helper sits next to this file; put it on the path even under ``python3 -I`` or ``-P``.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mcp_stdio import (
    JsonObject,
    RequestContext,
    RpcError,
    Server,
    Tool,
    ToolError,
    text_result,
)

VERSION = "1.0.0"


def _now(ctx: RequestContext, args: JsonObject) -> str:
    offset = args.get("timezone", 0)
    zone = datetime.timezone(datetime.timedelta(hours=offset))
    return datetime.datetime.now(zone).isoformat(timespec="seconds")


def _echo(ctx: RequestContext, args: JsonObject) -> str:
    message: str = args["message"]
    return message


def _add(ctx: RequestContext, args: JsonObject) -> JsonObject:
    total = args["a"] + args["b"]  # an integer if both are integers
    if isinstance(total, float) and not math.isfinite(total):
        raise ToolError("the sum is too large")
    return text_result(str(total), structured={"sum": total})


def _countdown(ctx: RequestContext, args: JsonObject) -> str:
    steps: int = args["steps"]
    delay = args.get("delay_ms", 100) / 1000
    for step in range(1, steps + 1):
        ctx.sleep(delay)  # raises Cancelled (no response is sent) if the client cancels
        message = f"step {step} of {steps}"
        ctx.report_progress(step, steps, message)
        ctx.log("info", f"countdown: {message}")
    return f"done after {steps} steps"


def _require(ctx: RequestContext, capability: str, tool: str) -> None:
    supported = ctx.server.client_supports(capability)
    if capability == "elicitation" and supported:
        # 2025-11-25: {} means form mode; {"url": {}} alone means URL mode only.
        modes = ctx.server.client_capabilities["elicitation"]
        supported = not modes or "form" in modes
    if not supported:
        raise ToolError(
            f"{tool} needs the client's {capability} capability, "
            "which it did not declare at initialize"
        )


def _ask_client(ctx: RequestContext, method: str, params: JsonObject) -> JsonObject:
    try:
        return ctx.request(method, params)
    except RpcError as error:
        raise ToolError(f"{method} failed: {error} (error {error.code})") from None


def _ask_user(ctx: RequestContext, args: JsonObject) -> str:
    _require(ctx, "elicitation", "ask_user")
    result = _ask_client(
        ctx,
        "elicitation/create",
        {
            "message": args["question"],
            "requestedSchema": {
                "type": "object",
                "properties": {"answer": {"type": "string"}},
                "required": ["answer"],
            },
        },
    )
    action = result.get("action")
    if action == "decline":
        return "declined"
    if action == "cancel":
        return "cancelled"
    content = result.get("content")
    answer = content.get("answer") if isinstance(content, dict) else None
    if action != "accept" or not isinstance(answer, str):
        raise ToolError("the client's answer to elicitation/create is not an accepted answer")
    return answer


def _text_of(content: Any) -> str | None:
    """The text of sampled content: one text block, or a list of blocks (2025-11-25)."""
    blocks = content if isinstance(content, list) else [content]
    texts = [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    if not texts or not all(isinstance(text, str) for text in texts):
        return None
    return "".join(texts)


def _summarize(ctx: RequestContext, args: JsonObject) -> str:
    _require(ctx, "sampling", "summarize")
    result = _ask_client(
        ctx,
        "sampling/createMessage",
        {
            "messages": [{"role": "user", "content": {"type": "text", "text": args["text"]}}],
            "maxTokens": 100,
        },
    )
    text = _text_of(result.get("content"))
    if text is None:
        raise ToolError("the client's sampled message has no text")
    return text


def _list_roots(ctx: RequestContext, args: JsonObject) -> str:
    _require(ctx, "roots", "list_roots")
    roots = _ask_client(ctx, "roots/list", {}).get("roots")
    if not isinstance(roots, list):
        raise ToolError("the client's answer to roots/list has no roots list")
    uris = [str(root.get("uri")) for root in roots if isinstance(root, dict)]
    return "\n".join(uris) if uris else "no roots"


def _fail(ctx: RequestContext, args: JsonObject) -> str:
    raise ToolError("this tool always fails")


def _crash(ctx: RequestContext, args: JsonObject) -> str:
    sys.stderr.write("clock: crash tool called, exiting with status 3\n")
    sys.stderr.flush()
    os._exit(3)


def _schema(properties: JsonObject | None = None, required: tuple[str, ...] = ()) -> JsonObject:
    schema: JsonObject = {
        "type": "object",
        "properties": properties or {},
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return schema


TEXT_LIMIT = 100_000

TOOLS = (
    Tool(
        "now",
        "The current time as ISO 8601 text, in UTC or at the given offset from UTC.",
        _schema(
            {
                "timezone": {
                    "type": "number",
                    "description": "Offset from UTC in hours, e.g. 2 or -5.5 (default 0).",
                    "minimum": -23.5,
                    "maximum": 23.5,
                }
            }
        ),
        _now,
        title="Current time",
    ),
    Tool(
        "echo",
        "Returns the message unchanged.",
        _schema({"message": {"type": "string", "maxLength": TEXT_LIMIT}}, ("message",)),
        _echo,
        title="Echo",
    ),
    Tool(
        "add",
        "Adds two numbers; the sum is also returned as structured content.",
        _schema({"a": {"type": "number"}, "b": {"type": "number"}}, ("a", "b")),
        _add,
        output_schema={
            "type": "object",
            "properties": {"sum": {"type": "number"}},
            "required": ["sum"],
        },
        title="Add",
    ),
    Tool(
        "countdown",
        "Counts down, one step every delay_ms milliseconds, reporting progress and logging "
        "each step at info level; can be cancelled.",
        _schema(
            {
                "steps": {"type": "integer", "minimum": 1, "maximum": 50},
                "delay_ms": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 10_000,
                    "description": "Milliseconds before each step (default 100).",
                },
            },
            ("steps",),
        ),
        _countdown,
        title="Countdown",
    ),
    Tool(
        "ask_user",
        "Asks the user a question through the client (elicitation) and returns the answer, "
        'or "declined" / "cancelled".',
        _schema({"question": {"type": "string", "maxLength": TEXT_LIMIT}}, ("question",)),
        _ask_user,
        title="Ask the user",
    ),
    Tool(
        "summarize",
        "Asks the client's model (sampling) to respond to the text, and returns what it said.",
        _schema({"text": {"type": "string", "maxLength": TEXT_LIMIT}}, ("text",)),
        _summarize,
        title="Summarize",
    ),
    Tool(
        "list_roots",
        "The URIs of the client's roots, one per line.",
        _schema(),
        _list_roots,
        title="List roots",
    ),
    Tool("fail", "Always fails, with isError true.", _schema(), _fail, title="Fail"),
    Tool(
        "crash",
        "Exits the server process at once with status 3, without answering (for fault tests).",
        _schema(),
        _crash,
        title="Crash",
    ),
)


def main() -> int:
    server = Server(
        "clock",
        VERSION,
        {"tools": {}, "logging": {}},
        instructions="Time, arithmetic and protocol-feature test tools.",
    )
    server.add_tools(*TOOLS)
    return server.run()


if __name__ == "__main__":
    sys.exit(main())
