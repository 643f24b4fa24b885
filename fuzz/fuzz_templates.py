"""Fuzz the Go templates of composite tools (vmcp_trio/composite/templates.py, go_functions.py):
any source compiles or raises TemplateSyntaxError (with a line and column inside the source), in
a tree of values too (the error then names the string's path); a compiled template reads only
root field paths without dunder names, and compiles again to the same template.

Rendered and evaluated against JSON data derived from the input, a template gives text of at
most MAX_OUTPUT_CHARS or raises TemplateRuntimeError, nothing else (no RecursionError, no
MemoryError, whatever the data or the ``printf`` widths), and does so deterministically: a second
run gives the same text or the same error. A lone expression evaluates to its value, which
prints (``go_str``) as the template renders; any other template evaluates to its text.

``range`` is bounded to 8 items while rendering here (the module's bound is per ``range``, so
nested ranges multiply their bounds: 10,000 items at each level would make inputs slow, not
wrong).

The input: the template source, then (after a NUL) the data: a JSON object is the context, any
other JSON value is its ``params``, and text that is not JSON gives ``params`` of that text, its
words and its length."""

from __future__ import annotations

import json
from typing import Any

from vmcp_trio.composite import go_functions
from vmcp_trio.composite.templates import (
    MAX_OUTPUT_CHARS,
    MISSING,
    Template,
    TemplateRuntimeError,
    TemplateSyntaxError,
    compile_template,
    compile_value,
    go_str,
)

MAX_RANGE_ITEMS = 8


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def context_of(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return {"params": {"text": text, "words": text.split(), "n": len(text)},
                "steps": {"first": {"output": {"items": text.split(), "ok": True}}}}
    return data if isinstance(data, dict) else {"params": data, "steps": {}}


def utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def outcome(run: Any, context: dict[str, Any]) -> tuple[str, Any]:
    """What one rendering or evaluation gives: ("value", it) or ("error", its message)."""
    try:
        return "value", run(context)
    except TemplateRuntimeError as exc:
        return "error", str(exc)


def check_compiled(template: Template, source: str) -> None:
    check(all(isinstance(part, str) and not part.startswith("__") for path in
              template.references for part in path), f"references {template.references!r}")
    again = compile_template(source)
    check(again == template and again.references == template.references
          and again.is_single_expression == template.is_single_expression, "compiled anew")


def check_runs(template: Template, context: dict[str, Any]) -> None:
    bound, go_functions.MAX_RANGE_ITEMS = go_functions.MAX_RANGE_ITEMS, MAX_RANGE_ITEMS
    try:
        rendered = outcome(template.render, context)
        check(rendered == outcome(template.render, context), "rendering is not deterministic")
        evaluated = outcome(template.evaluate, context)
        check(evaluated == outcome(template.evaluate, context), "evaluation is not deterministic")
    finally:
        go_functions.MAX_RANGE_ITEMS = bound
    (kind, text), value = rendered, evaluated[1]
    check(kind == "error" or (isinstance(text, str) and len(text) <= MAX_OUTPUT_CHARS),
          f"rendered {rendered!r}")
    check(kind == "error" or utf8(text) or not utf8(json.dumps(context, ensure_ascii=False)),
          "the template itself made text that is not UTF-8 (a lone surrogate)")
    check(evaluated[0] == "error" or value is MISSING or value is None
          or isinstance(value, str | int | float | list | dict), f"evaluated to {value!r}")
    if kind == "error" or evaluated[0] == "error":
        return
    if not template.is_single_expression:
        check(value == text, "a template of text evaluated to other text than it renders")
        return
    try:
        printed = go_str(value)
    except TemplateRuntimeError:
        return
    check(printed == text, f"evaluated to {value!r}, printed {printed!r}, rendered {text!r}")


def TestOneInput(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    source, _, rest = text.partition("\0")
    try:
        template = compile_template(source)
    except TemplateSyntaxError as exc:
        check(1 <= exc.line <= source.count("\n") + 1 and exc.column >= 1 and exc.path == "",
              f"{exc} is not inside the source")
        try:
            compile_value({"args": [1, source]})
        except TemplateSyntaxError as inner:
            check(inner.path == ".args[1]" and inner.message == exc.message,
                  f"in a tree: {inner}")
        else:
            raise AssertionError("a tree holding a bad template compiled") from None
        return
    check_compiled(template, source)
    check_runs(template, context_of(rest))


if __name__ == "__main__":
    from harness import fuzz

    fuzz(TestOneInput)
