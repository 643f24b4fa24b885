"""Go's printing and the built-in functions composite templates may call, run in Jinja2's sandbox.

The templates of composite tools (:mod:`.templates`) are Go ``text/template`` source translated
to Jinja2; what a Go template calls (``eq``, ``len``, ``index``, ``printf``, ``json``,
``fromJson``...) and how Go prints a value are here, as the globals of the one sandboxed Jinja2
environment (:data:`ENVIRONMENT`, :class:`jinja2.sandbox.ImmutableSandboxedEnvironment`, with
no filters or tests, and delimiters that template text cannot hold). Sans-IO and pure.

Rules they keep:

* **Data are JSON values**; a field is a key lookup on a mapping, never an attribute lookup; a
  missing key gives :data:`MISSING`, printed ``<no value>``; a field of a missing or ``null``
  value is a :class:`TemplateRuntimeError`, as in Go.
* **Printing follows Go's ``%v``** (:func:`go_str`): ``true``, ``5`` for an integral float,
  ``map[a:1 b:2]``, ``[a b]``, ``<no value>`` for null; ``printf`` covers the common verbs.
* **Comparisons** follow Go's rules for basic kinds (``eq`` with several operands is "equal to
  any"; ordering needs two values of one kind).
* **Bounded**: ``range`` over at most :data:`MAX_RANGE_ITEMS` items; ``printf`` widths and
  precisions of at most a million (Go's own bound) and text of at most :data:`MAX_OUTPUT_CHARS`,
  checked as it is made (a format may come from the data). Failures are
  :class:`TemplateRuntimeError` and quote no data.
"""

from __future__ import annotations

import html as html_lib
import json
import math
import re
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["ENVIRONMENT", "MAX_OUTPUT_CHARS", "MAX_RANGE_ITEMS", "MISSING", "TemplateError",
           "TemplateRuntimeError", "TemplateSyntaxError", "go_str"]

MAX_RANGE_ITEMS = 10_000
MAX_OUTPUT_CHARS = 10 * 1024 * 1024
_MAX_WIDTH = 1_000_000  # Go's fmt takes no larger width or precision


class TemplateError(ValueError):
    """A template that cannot be compiled or evaluated."""


class TemplateSyntaxError(TemplateError):
    """The source is not in the accepted subset; ``line``/``column`` are 1-based."""

    def __init__(self, message: str, line: int, column: int, path: str = "") -> None:
        where = f"{path}: " if path else ""
        super().__init__(f"{where}line {line}, column {column}: {message}")
        self.message = message
        self.line = line
        self.column = column
        self.path = path  # inside a tree of templates (``.a[2]``); empty for a lone template

    def within(self, prefix: str) -> TemplateSyntaxError:
        """The same error one level deeper in a tree of templates."""
        return TemplateSyntaxError(self.message, self.line, self.column, prefix + self.path)


class TemplateRuntimeError(TemplateError):
    """Evaluation failed (a field of a missing value, a bad ``fromJson`` input, too much output)."""


class _Missing:
    """The value of a missing key: falsy, printed ``<no value>`` as Go prints it."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()




def go_str(value: Any) -> str:
    """``value`` printed as Go's ``fmt.Sprint`` prints the JSON value ToolHive would hold."""
    if isinstance(value, str):
        return value
    if value is None or value is MISSING:
        return "<no value>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{go_str(k)}:{go_str(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(go_str(v) for v in value) + "]"
    raise TemplateRuntimeError(f"cannot print a value of type {type(value).__name__}")


def _go_float(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    if not exponent:
        return text
    sign = "-" if exponent.startswith("-") else "+"
    return f"{mantissa}e{sign}{exponent.lstrip('+-').rjust(2, '0')}"


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, MISSING)
    if obj is None or obj is MISSING:
        raise TemplateRuntimeError(f"nil pointer evaluating .{name}")
    raise TemplateRuntimeError(f"can't evaluate field {name} in type {_go_type(obj)}")


def _go_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "map[string]interface {}"
    if isinstance(value, (list, tuple)):
        return "[]interface {}"
    return "<nil>"


def _index(obj: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(obj, Mapping):
            obj = obj.get(key, MISSING) if isinstance(key, str) else _bad_index(obj, key)
        elif isinstance(obj, (list, tuple, str)):
            position = _int_arg(key, "index")
            if not 0 <= position < len(obj):
                raise TemplateRuntimeError(f"index out of range: {position}")
            obj = obj[position]
        elif obj is None or obj is MISSING:
            raise TemplateRuntimeError("index of untyped nil")
        else:
            raise TemplateRuntimeError(f"can't index item of type {_go_type(obj)}")
    return obj


def _bad_index(obj: Any, key: Any) -> Any:
    raise TemplateRuntimeError(f"value has type {_go_type(key)}; should be string")


def _int_arg(value: Any, function: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TemplateRuntimeError(f"{function}: cannot use type {_go_type(value)} as an index")
    if isinstance(value, float) and not value.is_integer():
        raise TemplateRuntimeError(f"{function}: index must be a whole number")
    return int(value)


def _slice(obj: Any, *bounds: Any) -> Any:
    if not isinstance(obj, (list, tuple, str)):
        raise TemplateRuntimeError(f"can't slice item of type {_go_type(obj)}")
    if len(bounds) > 2:
        raise TemplateRuntimeError("slice: too many indexes (three-index slices are unsupported)")
    low = _int_arg(bounds[0], "slice") if bounds else 0
    high = _int_arg(bounds[1], "slice") if len(bounds) > 1 else len(obj)
    if not 0 <= low <= high <= len(obj):
        raise TemplateRuntimeError(f"slice: index out of range: [{low}:{high}]")
    return obj[low:high]


def _len(obj: Any) -> int:
    if isinstance(obj, str):
        return len(obj.encode())
    if isinstance(obj, (Mapping, list, tuple)):
        return len(obj)
    raise TemplateRuntimeError(f"len of type {_go_type(obj)}")


def _kind(value: Any) -> str:
    if value is None or value is MISSING:
        return "nil"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "other"


def _eq(first: Any, *others: Any) -> bool:
    if not others:
        raise TemplateRuntimeError("eq: missing argument for comparison")
    for other in others:
        kinds = {_kind(first), _kind(other)}
        if "other" in kinds:
            raise TemplateRuntimeError("eq: non-comparable type (map or list)")
        if len(kinds) == 1 and (first == other or kinds == {"nil"}):
            return True
    return False


def _ne(first: Any, second: Any) -> bool:
    return not _eq(first, second)


def _ordered(name: str, first: Any, second: Any) -> tuple[Any, Any]:
    kind = _kind(first)
    if kind not in ("number", "string") or kind != _kind(second):
        raise TemplateRuntimeError(f"{name}: incompatible types for comparison")
    return first, second


def _lt(a: Any, b: Any) -> bool:
    x, y = _ordered("lt", a, b)
    return bool(x < y)


def _le(a: Any, b: Any) -> bool:
    x, y = _ordered("le", a, b)
    return bool(x <= y)


def _gt(a: Any, b: Any) -> bool:
    x, y = _ordered("gt", a, b)
    return bool(x > y)


def _ge(a: Any, b: Any) -> bool:
    x, y = _ordered("ge", a, b)
    return bool(x >= y)


def _json(value: Any) -> str:
    """Go's ``json.Marshal``: compact, map keys sorted, ``<``, ``>``, ``&`` escaped."""
    if value is MISSING:
        value = None
    try:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise TemplateRuntimeError("json: value is not JSON") from exc
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escape)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _from_json(text: Any) -> Any:
    if not isinstance(text, str):
        raise TemplateRuntimeError(f"fromJson: expected a string, got {_go_type(text)}")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise TemplateRuntimeError("fromJson: failed to unmarshal JSON") from exc


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
               "\v": "\\v", "\\": "\\\\", '"': '\\"'}  # fmt: skip


def _quote(value: Any) -> str:
    """Go's ``%q`` of a string (``strconv.Quote``)."""
    out = ['"']
    for char in go_str(value):
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def _print(*args: Any) -> str:
    out = ""
    for i, arg in enumerate(args):
        if i and not isinstance(arg, str) and not isinstance(args[i - 1], str):
            out += " "
        out += go_str(arg)
    return out


def _println(*args: Any) -> str:
    return " ".join(go_str(a) for a in args) + "\n"


_VERB = re.compile(r"%([-+# 0]*)(\d+)?(?:\.(\d+))?([a-zA-Z%])")


def _printf(fmt: Any, *args: Any) -> str:
    """Go's ``fmt.Sprintf`` for the verbs templates use: v s d q f e g t x X c %."""
    if not isinstance(fmt, str):
        raise TemplateRuntimeError("printf: the format must be a string")
    queue = list(args)
    used = size = 0

    def verb(match: re.Match[str]) -> str:
        nonlocal used, size
        flags, width, precision, letter = match.groups()
        if letter == "%":
            return "%"
        if any(len(n) > 7 or int(n or 0) > _MAX_WIDTH
               for n in ((width or "").lstrip("0"), (precision or "").lstrip("0"))):
            raise TemplateRuntimeError(f"printf: width or precision larger than {_MAX_WIDTH}")
        if used >= len(queue):
            return f"%!{letter}(MISSING)"
        value = queue[used]
        used += 1
        text = _format_verb(letter, value, precision)
        if width:
            text = (
                text.ljust(int(width))
                if "-" in flags
                else text.rjust(int(width), "0" if "0" in flags and letter in "dfegxX" else " ")
            )
        size += len(text)
        if size > MAX_OUTPUT_CHARS:
            raise TemplateRuntimeError(f"printf: output too large (more than {MAX_OUTPUT_CHARS} "
                                       "characters)")
        return text

    out = _VERB.sub(verb, fmt)
    if used < len(queue):
        out += "%!(EXTRA " + ", ".join(f"{_go_type(v)}={go_str(v)}" for v in queue[used:]) + ")"
    return out


def _format_verb(letter: str, value: Any, precision: str | None) -> str:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if letter in "vs":
        return go_str(value)
    if letter == "q":
        return _quote(value)
    if letter == "t" and isinstance(value, bool):
        return go_str(value)
    if letter == "d" and number and float(value).is_integer():
        return str(int(value))
    if letter in "feg" and number:
        return format(float(value), f".{precision or 6}{letter}" if letter != "g" else "g")
    if letter in "xX" and number and float(value).is_integer():
        return format(int(value), letter)
    if letter in "xX" and isinstance(value, str):
        return value.encode().hex() if letter == "x" else value.encode().hex().upper()
    if letter == "c" and number:
        return chr(int(value))
    return f"%!{letter}({_go_type(value)}={go_str(value)})"


def _html(*args: Any) -> str:
    text = _print(*args)
    return (
        html_lib.escape(text, quote=False)
        .replace('"', "&#34;")
        .replace("'", "&#39;")
        .replace("\x00", "\ufffd")
    )


def _urlquery(*args: Any) -> str:
    return urllib.parse.quote_plus(_print(*args))


def _range(value: Any) -> list[tuple[Any, Any]]:
    """(key, element) pairs as Go's ``range`` yields them: map keys sorted; nil gives none."""
    if value is None or value is MISSING:
        pairs: list[tuple[Any, Any]] = []
    elif isinstance(value, Mapping):
        pairs = [(k, value[k]) for k in sorted(value)]
    elif isinstance(value, (list, tuple)):
        pairs = list(enumerate(value))
    elif isinstance(value, int) and not isinstance(value, bool):
        pairs = [(i, i) for i in range(max(value, 0))] if value <= MAX_RANGE_ITEMS else []
    else:
        raise TemplateRuntimeError(f"range can't iterate over type {_go_type(value)}")
    if len(pairs) > MAX_RANGE_ITEMS or (isinstance(value, int) and value > MAX_RANGE_ITEMS):
        raise TemplateRuntimeError(f"range over more than {MAX_RANGE_ITEMS} items")
    return pairs


# The globals the translated source calls (see .templates: the names it translates each to).
_GLOBALS: dict[str, Callable[..., Any]] = {
    "go_field": _field, "go_eq": _eq, "go_ne": _ne, "go_lt": _lt, "go_le": _le, "go_gt": _gt,
    "go_ge": _ge, "go_len": _len, "go_index": _index, "go_slice": _slice, "go_print": _print,
    "go_printf": _printf, "go_println": _println, "go_html": _html, "go_urlquery": _urlquery,
    "go_json": _json, "go_quote": _quote, "go_from_json": _from_json, "go_range": _range,
}  # fmt: skip

# The Jinja source is generated here only, and template text may not hold NUL, so delimiters that
# start with NUL can never be confused with text of the template.
ENVIRONMENT = ImmutableSandboxedEnvironment(
    block_start_string="\x00{%", block_end_string="%}\x00",
    variable_start_string="\x00{{", variable_end_string="}}\x00",
    comment_start_string="\x00{#", comment_end_string="#}\x00",
    autoescape=False, keep_trailing_newline=True, finalize=go_str,
)  # fmt: skip
ENVIRONMENT.globals.clear()
ENVIRONMENT.globals.update(_GLOBALS)
ENVIRONMENT.filters.clear()
ENVIRONMENT.tests.clear()
