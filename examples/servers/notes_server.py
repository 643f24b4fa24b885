"""The "notes" example MCP server: stdio, standard library only.

A backend for the gateway's quickstart and for its tests, covering tools, resources, prompts and
completions. Notes live in memory, for the life of the process.

* Tools: ``add_note``, ``list_notes``, ``delete_note``.
* Resources: ``notes://index`` (every note, as text) and ``notes://note/{id}`` (a template, and
  each existing note in ``resources/list``). Subscriptions are supported: a subscriber gets
  ``notifications/resources/updated`` when the index or its note changes, and every client gets
  ``notifications/resources/list_changed`` when a note is added or deleted.
* Prompts: ``summarize_notes`` with an optional ``style`` argument, completed by
  ``completion/complete`` ("brief", "detailed", "bullet"); note ids are completed for the
  ``notes://note/{id}`` template too.

Run it as ``python3 examples/servers/notes_server.py``; it speaks newline-delimited JSON-RPC on
stdin/stdout (see ``mcp_stdio.py``).
"""

from __future__ import annotations

import itertools
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The helper sits next to this file; put it on the path even under ``python3 -I`` or ``-P``.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mcp_stdio import (
    INVALID_PARAMS,
    RESOURCE_NOT_FOUND,
    JsonObject,
    RequestContext,
    RpcError,
    Server,
    Tool,
    ToolError,
    check_no_cursor,
    require_string,
)

VERSION = "1.0.0"
INDEX_URI = "notes://index"
NOTE_PREFIX = "notes://note/"
NOTE_TEMPLATE = NOTE_PREFIX + "{id}"
MAX_NOTES = 1000
MAX_TITLE = 200
MAX_TEXT = 100_000
MAX_COMPLETIONS = 100
STYLES = {
    "brief": "briefly, in one or two sentences",
    "detailed": "in detail, keeping every fact",
    "bullet": "as a bulleted list, one bullet per note",
}


@dataclass(frozen=True)
class Note:
    id: str
    title: str
    text: str


class Notes:
    """The notes, the resource subscriptions, and the notifications their changes cause."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self._lock = threading.Lock()
        self._notes: dict[str, Note] = {}
        self._ids = itertools.count(1)
        self._subscribed: set[str] = set()

    def all(self) -> list[Note]:
        with self._lock:
            return list(self._notes.values())

    def get(self, note_id: str) -> Note | None:
        with self._lock:
            return self._notes.get(note_id)

    def add(self, title: str, text: str) -> Note:
        with self._lock:
            if len(self._notes) >= MAX_NOTES:
                raise ToolError(f"there are already {MAX_NOTES} notes: delete some first")
            note = Note(str(next(self._ids)), title, text)
            self._notes[note.id] = note
            updated = [INDEX_URI] if INDEX_URI in self._subscribed else []
        self._changed(updated)
        self.server.log("info", f"added note {note.id}")
        return note

    def delete(self, note_id: str) -> Note:
        uri = NOTE_PREFIX + note_id
        with self._lock:
            note = self._notes.pop(note_id, None)
            if note is None:
                raise ToolError(f"there is no note with id {note_id!r}")
            updated = [u for u in (INDEX_URI, uri) if u in self._subscribed]
            self._subscribed.discard(uri)
        self._changed(updated)
        self.server.log("info", f"deleted note {note_id}")
        return note

    def _changed(self, updated: list[str]) -> None:
        self.server.notify("notifications/resources/list_changed")
        for uri in updated:
            self.server.notify("notifications/resources/updated", {"uri": uri})

    def subscribe(self, uri: str) -> None:
        with self._lock:
            known = uri == INDEX_URI or (
                uri.startswith(NOTE_PREFIX) and uri.removeprefix(NOTE_PREFIX) in self._notes
            )
            if not known:
                raise _not_found(uri)
            self._subscribed.add(uri)

    def unsubscribe(self, uri: str) -> None:
        with self._lock:
            self._subscribed.discard(uri)

    def read(self, uri: str) -> str:
        if uri == INDEX_URI:
            return self.index_text()
        note = self.get(uri.removeprefix(NOTE_PREFIX)) if uri.startswith(NOTE_PREFIX) else None
        if note is None:
            raise _not_found(uri)
        return f"{note.title}\n\n{note.text}"

    def index_text(self) -> str:
        notes = self.all()
        if not notes:
            return "no notes"
        return "\n\n".join(f"## {note.id}: {note.title}\n{note.text}" for note in notes)


def _not_found(uri: str) -> RpcError:
    return RpcError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}", {"uri": uri})


def build_server() -> Server:
    server = Server(
        "notes",
        VERSION,
        {
            "tools": {"listChanged": False},
            "resources": {"subscribe": True, "listChanged": True},
            "prompts": {},
            "completions": {},
            "logging": {},
        },
        instructions="In-memory notes: add, list and delete them; read them as resources.",
    )
    notes = Notes(server)

    def titled(described: JsonObject, title: str) -> JsonObject:
        """``title`` is a display name from 2025-06-18 on."""
        if server.protocol_version >= "2025-06-18":
            described["title"] = title
        return described

    def add_note(ctx: RequestContext, args: JsonObject) -> str:
        return f"added note {notes.add(args['title'], args['text']).id}"

    def list_notes(ctx: RequestContext, args: JsonObject) -> str:
        listing = [f"{note.id}: {note.title}" for note in notes.all()]
        return "\n".join(listing) if listing else "no notes"

    def delete_note(ctx: RequestContext, args: JsonObject) -> str:
        return f"deleted note {notes.delete(args['id']).id}"

    server.add_tools(
        Tool(
            "add_note",
            "Adds a note; returns its id.",
            {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE},
                    "text": {"type": "string", "maxLength": MAX_TEXT},
                },
                "required": ["title", "text"],
                "additionalProperties": False,
            },
            add_note,
            title="Add a note",
        ),
        Tool(
            "list_notes",
            "Lists the notes, one per line, as '<id>: <title>'.",
            {"type": "object", "properties": {}, "additionalProperties": False},
            list_notes,
            title="List notes",
        ),
        Tool(
            "delete_note",
            "Deletes the note with this id.",
            {
                "type": "object",
                "properties": {"id": {"type": "string", "description": 'A note id, e.g. "1".'}},
                "required": ["id"],
                "additionalProperties": False,
            },
            delete_note,
            title="Delete a note",
        ),
    )

    @server.method("resources/list")
    def list_resources(ctx: RequestContext) -> JsonObject:
        check_no_cursor(ctx)
        index = {
            "uri": INDEX_URI,
            "name": "index",
            "description": "Every note, as text.",
            "mimeType": "text/plain",
        }
        resources = [titled(index, "All notes")]
        for note in notes.all():
            described = {"uri": NOTE_PREFIX + note.id, "name": f"note-{note.id}"}
            resources.append(titled({**described, "mimeType": "text/plain"}, note.title))
        return {"resources": resources}

    @server.method("resources/templates/list")
    def list_templates(ctx: RequestContext) -> JsonObject:
        check_no_cursor(ctx)
        template = {
            "uriTemplate": NOTE_TEMPLATE,
            "name": "note",
            "description": "One note, by id: its title, a blank line, then its text.",
            "mimeType": "text/plain",
        }
        return {"resourceTemplates": [titled(template, "A note")]}

    @server.method("resources/read")
    def read_resource(ctx: RequestContext) -> JsonObject:
        uri = require_string(ctx, "uri")
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": notes.read(uri)}]}

    @server.method("resources/subscribe")
    def subscribe(ctx: RequestContext) -> JsonObject:
        notes.subscribe(require_string(ctx, "uri"))
        return {}

    @server.method("resources/unsubscribe")
    def unsubscribe(ctx: RequestContext) -> JsonObject:
        notes.unsubscribe(require_string(ctx, "uri"))
        return {}

    @server.method("prompts/list")
    def list_prompts(ctx: RequestContext) -> JsonObject:
        check_no_cursor(ctx)
        style = {
            "name": "style",
            "description": f"How to summarize: {', '.join(STYLES)}.",
            "required": False,
        }
        prompt = {
            "name": "summarize_notes",
            "description": "Asks the model to summarize every note.",
            "arguments": [style],
        }
        return {"prompts": [titled(prompt, "Summarize the notes")]}

    @server.method("prompts/get")
    def get_prompt(ctx: RequestContext) -> JsonObject:
        name = require_string(ctx, "name")
        if name != "summarize_notes":
            raise RpcError(INVALID_PARAMS, f"Unknown prompt: {name}")
        arguments = ctx.params.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "prompts/get: arguments must be an object")
        style = arguments.get("style")
        if style is not None and style not in STYLES:
            raise RpcError(
                INVALID_PARAMS, f"summarize_notes: style must be one of {', '.join(STYLES)}"
            )
        how = f" {STYLES[style]}" if style else ""
        text = f"Summarize the following notes{how}.\n\n{notes.index_text()}"
        return {
            "description": "Summarize the notes",
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        }

    @server.method("completion/complete")
    def complete(ctx: RequestContext) -> JsonObject:
        ref, argument = ctx.params.get("ref"), ctx.params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise RpcError(INVALID_PARAMS, "completion/complete: ref and argument are required")
        name, value = argument.get("name"), argument.get("value", "")
        if not isinstance(name, str) or not isinstance(value, str):
            raise RpcError(INVALID_PARAMS, "completion/complete: argument needs a name and value")
        candidates: list[str]
        if ref.get("type") == "ref/prompt":
            if ref.get("name") != "summarize_notes":
                raise RpcError(INVALID_PARAMS, f"Unknown prompt: {ref.get('name')}")
            candidates = list(STYLES) if name == "style" else []
        elif ref.get("type") == "ref/resource":
            if ref.get("uri") != NOTE_TEMPLATE:
                raise RpcError(INVALID_PARAMS, f"Unknown resource template: {ref.get('uri')}")
            candidates = [note.id for note in notes.all()] if name == "id" else []
        else:
            raise RpcError(
                INVALID_PARAMS, f"completion/complete: unknown ref type {ref.get('type')!r}"
            )
        values = [candidate for candidate in candidates if candidate.startswith(value)]
        completion: dict[str, Any] = {
            "values": values[:MAX_COMPLETIONS],
            "total": len(values),
            "hasMore": len(values) > MAX_COMPLETIONS,
        }
        return {"completion": completion}

    return server


def main() -> int:
    return build_server().run()


if __name__ == "__main__":
    sys.exit(main())
