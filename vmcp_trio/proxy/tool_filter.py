"""``--ignore-tool``: tools of the remote server that a stdio client neither sees nor calls.

One job, no I/O: say whether a tool name is ignored, drop ignored tools from a ``tools/list``
answer, and answer a ``tools/call`` of one without asking the remote. The rules, as
mcp-remote's ``--ignore-tool`` keeps them:

* A pattern matches the whole name, case-insensitively; ``*`` stands for any run of characters
  (``delete*`` ignores ``delete_file`` and ``Delete``); every other character is itself.
* A ``tools/list`` answer (JSON, or one SSE event's) loses the tools whose names match; the
  rest of the answer is kept as it came.
* A ``tools/call`` of an ignored tool gets -32603 ``Tool "<name>" is not available`` at once,
  in a 2025-03-26 batch too (the rest of the batch goes on).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

__all__ = ["ToolFilter"]


class ToolFilter:
    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(patterns)
        self._regexes = tuple(re.compile(
            ".*".join(re.escape(part) for part in pattern.split("*")), re.IGNORECASE)
            for pattern in self.patterns)

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def ignores(self, name: object) -> bool:
        return isinstance(name, str) and any(regex.fullmatch(name) for regex in self._regexes)

    def refusal(self, message: object) -> bytes | None:
        """The answer to ``message`` when it calls an ignored tool; None: it goes on."""
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            return None
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if not self.ignores(name):
            return None
        return orjson.dumps({"jsonrpc": "2.0", "id": message.get("id"), "error": {
            "code": -32603, "message": f'Tool "{str(name)[:200]}" is not available'}})

    def split(self, batch: list[Any]) -> tuple[list[Any], list[bytes]]:
        """A batch's messages that go on, and the answers to those that call ignored tools."""
        kept: list[Any] = []
        refusals: list[bytes] = []
        for message in batch:
            refused = self.refusal(message)
            if refused is None:
                kept.append(message)
            else:
                refusals.append(refused)
        return kept, refusals

    def listed(self, answer: bytes) -> bytes:
        """A ``tools/list`` answer without the ignored tools (unchanged when none is)."""
        try:
            decoded: Any = orjson.loads(answer)
        except orjson.JSONDecodeError:
            return answer
        result = decoded.get("result") if isinstance(decoded, dict) else None
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
            return answer
        tools: list[Any] = result["tools"]
        kept = [tool for tool in tools
                if not (isinstance(tool, dict) and self.ignores(tool.get("name")))]
        if len(kept) == len(tools):
            return answer
        return orjson.dumps({**decoded, "result": {**result, "tools": kept}})
