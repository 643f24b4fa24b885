"""The templates of ToolHive composite tools: Go ``text/template`` source run in Jinja2's sandbox.

ToolHive manifests write step arguments, conditions, messages, forEach collections and output
values as Go templates (``{{.params.repo}}``, ``{{json .steps.list.output.items}}``,
``{{eq .steps.approval.output.action "accept"}}``, ``{{(fromJson .steps.pr.output.text).title}}``).
This module compiles that subset into Jinja2 source and runs it in
:class:`jinja2.sandbox.ImmutableSandboxedEnvironment`; nothing is ever handed to ``eval``. Sans-IO
and pure: no clock, no randomness, no I/O.

The functions a template may call and how values print are :mod:`.go_functions`'s.

Rules it keeps:

* **The accepted language** is what ToolHive documents (``pkg/vmcp/composer/template_expander.go``,
  ``docs/operator/composite-tools-quick-reference.md``): text and ``{{ }}`` actions with the
  ``{{-``/``-}}`` trim markers and ``{{/* comments */}}``; fields ``.a.b`` on the dot, ``$`` and
  ``$var``; pipelines ``x | f y`` (the value is the last argument); parenthesised pipelines with a
  field chain after them; string (``"…"`` and raw), number, ``true``/``false``/``nil`` literals;
  ``if``/``else if``/``else``, ``with``/``else``, ``range`` (also ``$i, $v :=``) and ``$x :=``
  declarations; the Go built-ins ``and or not eq ne lt le gt ge len index slice print printf
  println html urlquery`` and ToolHive's ``json quote fromJson``. Anything else (``define``,
  ``template``, ``block``, ``break``, ``continue``, ``=`` assignment, ``call``, ``js``, unknown
  functions) is a :class:`TemplateSyntaxError` naming the construct and its line and column, at
  compile time, as Go's parser does for unknown functions, and so is a ``$var`` used outside its
  scope (Go's: up to the ``{{end}}`` of its block; here a branch's also ends at ``{{else}}``).
* **Data are JSON values.** A field is a key lookup on a mapping (never an attribute lookup, so
  ``.items`` is the key ``items``, not ``dict.items``); dunder names (``.__class__``) are refused at
  compile time; the sandbox stays as a second wall. A missing key gives :data:`MISSING`, printed as
  Go prints it (``<no value>``); a field of a missing or ``null`` value is an error, as in Go.
* **Printing follows Go's ``%v``**: ``true``, ``5`` for an integral float, ``map[a:1 b:2]``,
  ``[a b]``, ``<no value>`` for null.
* **Types are kept for a lone expression** (decision; ToolHive renders strings and then coerces
  them to the called tool's input schema or to the declared output type): when the whole source is
  exactly one action, :meth:`Template.evaluate` returns the value itself (``"{{.params.count}}"``
  gives the integer, ``"{{.steps.a.output}}"`` the mapping) and :data:`MISSING` when it names a
  missing key. Any other template evaluates to its rendered text.
* **Bounded**: sources of at most :data:`MAX_TEMPLATE_CHARS`, parentheses nested at most
  :data:`MAX_NESTING` deep, blocks nested as deep as Python compiles them (about 20 ``range``),
  rendered text of at most :data:`MAX_OUTPUT_CHARS` (ToolHive's 10 MB),
  ``range`` over at most :data:`MAX_RANGE_ITEMS` items. Runtime failures are
  :class:`TemplateRuntimeError`; they quote no data.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from jinja2 import TemplateError as _JinjaError

from .go_functions import (
    ENVIRONMENT,
    MAX_OUTPUT_CHARS,
    MAX_RANGE_ITEMS,
    MISSING,
    TemplateError,
    TemplateRuntimeError,
    TemplateSyntaxError,
    go_str,
)

__all__ = [
    "MAX_NESTING",
    "MAX_OUTPUT_CHARS",
    "MAX_RANGE_ITEMS",
    "MAX_TEMPLATE_CHARS",
    "MISSING",
    "CompiledValue",
    "Template",
    "TemplateError",
    "TemplateRuntimeError",
    "TemplateSyntaxError",
    "compile_template",
    "compile_value",
    "expand_value",
    "go_str",
    "references_of",
]

MAX_TEMPLATE_CHARS = 100_000
MAX_NESTING = 32
_MAX_VALUE_DEPTH = 100  # nesting of an arguments tree (ToolHive's maxTemplateDepth)

# The translator's vocabulary: Go's built-ins (by the Jinja global each becomes, and how many
# arguments it takes), the operators, and the constructs refused.
_FUNCTIONS: dict[str, tuple[str, int | None]] = {
    "eq": ("go_eq", None), "ne": ("go_ne", 2), "lt": ("go_lt", 2), "le": ("go_le", 2),
    "gt": ("go_gt", 2), "ge": ("go_ge", 2), "len": ("go_len", 1), "index": ("go_index", None),
    "slice": ("go_slice", None), "print": ("go_print", None), "printf": ("go_printf", None),
    "println": ("go_println", None), "html": ("go_html", None), "urlquery": ("go_urlquery", None),
    "json": ("go_json", 1), "quote": ("go_quote", 1), "fromJson": ("go_from_json", 1),
}  # fmt: skip
_OPERATORS = {"and", "or", "not"}
_UNSUPPORTED = {"define", "template", "block", "break", "continue", "call", "js"}

# ---------------------------------------------------------------------------------------------
# Lexing and translating Go template source


@dataclass(frozen=True)
class _Token:
    kind: str  # field dot var ident string number lparen rparen pipe declare assign comma end
    text: str
    pos: int
    spaced: bool  # whitespace came right before it


_NUMBER = re.compile(
    r"[+-]?(?:0[xX][0-9a-fA-F_]+|(?:\d[\d_]*)?\.?\d[\d_]*(?:[eE][+-]?\d+)?)(?![\w.])"
)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPACE = " \t\r\n"
_ROOT_DOT = "dot0"


class _Translator:
    def __init__(self, source: str) -> None:
        self.src = source
        self.out: list[str] = []
        self.dots = [_ROOT_DOT]
        self.blocks: list[tuple[str, int]] = []  # (keyword, pos) of open if/with/range
        self.variables: list[str] = []  # the $variables in scope, as Go's parser tracks them
        self.scopes: list[int] = []  # len(variables) when each open block started
        self.counter = 0
        self.actions = 0
        self.has_text = False
        self.single: str | None = None  # the Jinja expression when the source is one action
        self.references: set[tuple[str, ...]] = set()

    # --- errors and positions
    def fail(self, message: str, pos: int) -> TemplateSyntaxError:
        line = self.src.count("\n", 0, pos) + 1
        column = pos - (self.src.rfind("\n", 0, pos) + 1) + 1
        return TemplateSyntaxError(message, line, column)

    # --- the text/action split
    def translate(self) -> str:
        pos, pending_trim = 0, False
        while pos <= len(self.src):
            start = self.src.find("{{", pos)
            text = self.src[pos:] if start < 0 else self.src[pos:start]
            trim_left = (
                start >= 0
                and self.src.startswith("{{-", start)
                and (start + 3 < len(self.src) and self.src[start + 3] in _SPACE)
            )
            if pending_trim:
                text = text.lstrip(_SPACE)
            if trim_left:
                text = text.rstrip(_SPACE)
            self.emit_text(text)
            if start < 0:
                break
            pos, pending_trim = self.action(start + (4 if trim_left else 2))
        if self.blocks:
            keyword, at = self.blocks[-1]
            raise self.fail(f"unexpected EOF: {keyword!r} has no {{{{end}}}}", at)
        return "".join(self.out)

    def emit_text(self, text: str) -> None:
        if text:
            self.has_text = True
            self.out.append(text)

    def action(self, pos: int) -> tuple[int, bool]:
        begin = pos
        while pos < len(self.src) and self.src[pos] in _SPACE:
            pos += 1
        if self.src.startswith("/*", pos):
            close = self.src.find("*/", pos + 2)
            if close < 0:
                raise self.fail("unclosed comment", pos)
            end, trim = self.close_delim(close + 2)
            return end, trim
        tokens, end, trim = self.lex(begin)
        self.statement(tokens, begin)
        return end, trim

    def close_delim(self, pos: int) -> tuple[int, bool]:
        rest = self.src[pos:]
        stripped = rest.lstrip(_SPACE)
        if stripped.startswith("-}}") and len(stripped) < len(rest):
            return pos + len(rest) - len(stripped) + 3, True
        if rest.startswith("}}"):
            return pos + 2, False
        raise self.fail("comment ends before closing delimiter", pos)

    def lex(self, pos: int) -> tuple[list[_Token], int, bool]:
        src, depth = self.src, 0
        tokens: list[_Token] = []
        spaced = True
        while True:
            if pos >= len(src):
                raise self.fail("unclosed action", pos)
            char = src[pos]
            if char in _SPACE:
                after = pos
                while after < len(src) and src[after] in _SPACE:
                    after += 1
                if src.startswith("-}}", after):
                    return tokens, after + 3, True
                pos, spaced = after, True
                continue
            if src.startswith("}}", pos):
                return tokens, pos + 2, False
            start = pos
            if char == "." and not _NUMBER.match(src, pos):
                match = _IDENT.match(src, pos + 1)
                if match:
                    kind, pos = "field", match.end()
                else:
                    kind, pos = "dot", pos + 1
            elif char == "$":
                match = _IDENT.match(src, pos + 1)
                kind, pos = "var", match.end() if match else pos + 1
            elif char == '"':
                pos = self.string_end(pos)
                kind = "string"
            elif char == "`":
                close = src.find("`", pos + 1)
                if close < 0:
                    raise self.fail("unterminated raw string", pos)
                kind, pos = "string", close + 1
            elif char == "'":
                raise self.fail("character constants are not supported; use a string", pos)
            elif (match := _NUMBER.match(src, pos)) and (char.isdigit() or char in "+-."):
                kind, pos = "number", match.end()
            elif match := _IDENT.match(src, pos):
                kind, pos = "ident", match.end()
            elif src.startswith(":=", pos):
                kind, pos = "declare", pos + 2
            elif char in "()|=,":
                kind = {"(": "lparen", ")": "rparen", "|": "pipe", "=": "assign", ",": "comma"}[
                    char
                ]
                pos += 1
                depth += {"lparen": 1, "rparen": -1}.get(kind, 0)
                if depth > MAX_NESTING:
                    raise self.fail(f"parentheses nested deeper than {MAX_NESTING}", start)
            else:
                raise self.fail(f"unexpected {char!r} in action", pos)
            tokens.append(_Token(kind, src[start:pos], start, spaced))
            spaced = False

    def string_end(self, pos: int) -> int:
        index = pos + 1
        while index < len(self.src):
            char = self.src[index]
            if char == "\\":
                index += 2
                continue
            if char == '"':
                return index + 1
            if char == "\n":
                break
            index += 1
        raise self.fail("unterminated quoted string", pos)

    # --- statements
    def statement(self, tokens: list[_Token], pos: int) -> None:
        if not tokens:
            raise self.fail("missing value for command", pos)
        head = tokens[0]
        keyword = head.text if head.kind == "ident" else ""
        if keyword in _UNSUPPORTED - {"call", "js"}:
            raise self.fail(f"{keyword!r} is not supported in composite tool templates", head.pos)
        self.actions += 1
        if keyword in ("if", "with", "range"):
            self.open_block(keyword, tokens[1:], head.pos)
        elif keyword == "else":
            self.else_branch(tokens[1:], head.pos)
        elif keyword == "end":
            if len(tokens) > 1:
                raise self.fail("unexpected token after end", tokens[1].pos)
            self.close_block(head.pos)
        elif head.kind == "var" and len(tokens) > 1 and tokens[1].kind in ("declare", "assign"):
            if tokens[1].kind == "assign":
                raise self.fail(
                    "assignment with '=' is not supported; declare with ':='", tokens[1].pos
                )
            expr = self.pipeline(tokens[2:], tokens[1].pos)
            self.variables.append(self.var(head))
            self.out.append(f"\x00{{% set {self.var(head)} = {expr} %}}\x00")
        else:
            expr = self.pipeline(tokens, head.pos)
            self.single = expr if self.actions == 1 else None
            self.out.append(f"\x00{{{{ {expr} }}}}\x00")

    def open_block(self, keyword: str, tokens: list[_Token], pos: int) -> None:
        self.blocks.append((keyword, pos))
        self.scopes.append(len(self.variables))
        if keyword == "if":
            self.out.append(f"\x00{{% if {self.pipeline(tokens, pos)} %}}\x00")
            return
        dot = self.new_dot()
        if keyword == "with":
            expr = self.pipeline(tokens, pos)
            self.out.append(f"\x00{{% with {dot} = {expr} %}}\x00\x00{{% if {dot} %}}\x00")
        else:
            names, tokens = self.range_vars(tokens, pos)
            expr = self.pipeline(tokens, pos)
            self.variables.extend(names)
            key = names[0] if len(names) == 2 else "range_key"
            self.out.append(f"\x00{{% for {key}, {dot} in go_range({expr}) %}}\x00")
            if names:
                self.out.append(f"\x00{{% set {names[-1]} = {dot} %}}\x00")
        self.dots.append(dot)

    def range_vars(self, tokens: list[_Token], pos: int) -> tuple[list[str], list[_Token]]:
        kinds = [t.kind for t in tokens[:4]]
        if kinds[:2] == ["var", "declare"]:
            return [self.var(tokens[0])], tokens[2:]
        if kinds == ["var", "comma", "var", "declare"]:
            return [self.var(tokens[0]), self.var(tokens[2])], tokens[4:]
        if any(t.kind == "declare" for t in tokens):
            raise self.fail("unsupported variable declaration in range", pos)
        return [], tokens

    def else_branch(self, tokens: list[_Token], pos: int) -> None:
        if not self.blocks:
            raise self.fail("unexpected {{else}}", pos)
        keyword, _ = self.blocks[-1]
        del self.variables[self.scopes[-1] :]  # a branch's variables end with it
        if tokens and tokens[0].text == "if" and keyword == "if":
            self.out.append(f"\x00{{% elif {self.pipeline(tokens[1:], pos)} %}}\x00")
            return
        if tokens:
            raise self.fail("only {{else if ...}} may follow else", tokens[0].pos)
        if keyword != "if":
            self.dots.pop()  # the else of with/range runs with the outer dot
            self.dots.append(self.dots[-1])
        self.out.append("\x00{% else %}\x00")

    def close_block(self, pos: int) -> None:
        if not self.blocks:
            raise self.fail("unexpected {{end}}", pos)
        keyword, _ = self.blocks.pop()
        del self.variables[self.scopes.pop() :]  # Go: a variable's scope ends at {{end}}
        if keyword == "if":
            self.out.append("\x00{% endif %}\x00")
            return
        self.dots.pop()
        closing = "endif %}\x00\x00{% endwith" if keyword == "with" else "endfor"
        self.out.append(f"\x00{{% {closing} %}}\x00")

    def new_dot(self) -> str:
        self.counter += 1
        return f"dot{self.counter}"

    def var(self, token: _Token) -> str:
        name = token.text[1:]
        return _ROOT_DOT if not name else f"var_{name}"

    # --- expressions
    def pipeline(self, tokens: list[_Token], pos: int) -> str:
        if not tokens:
            raise self.fail("missing value for command", pos)
        commands: list[list[_Token]] = [[]]
        depth = 0
        for token in tokens:
            depth += {"lparen": 1, "rparen": -1}.get(token.kind, 0)
            if token.kind == "pipe" and depth == 0:
                commands.append([])
            else:
                commands[-1].append(token)
        expr: str | None = None
        for command in commands:
            if not command:
                raise self.fail("missing command in pipeline", pos)
            expr = self.command(command, expr)
        assert expr is not None
        return expr

    def command(self, tokens: list[_Token], piped: str | None) -> str:
        operands = self.operands(tokens)
        head, head_pos = operands[0]
        if head.startswith("fn:"):
            args = [self.call(e[3:], [], p) if e.startswith("fn:") else e for e, p in operands[1:]]
            if piped is not None:
                args.append(piped)
            return self.call(head[3:], args, head_pos)
        if len(operands) > 1 or piped is not None:
            raise self.fail("can't give argument to non-function", operands[-1][1])
        return head

    def call(self, name: str, args: list[str], pos: int) -> str:
        if name in _OPERATORS:
            if name == "not":
                if len(args) != 1:
                    raise self.fail("wrong number of args for not: want 1", pos)
                return f"(not {args[0]})"
            if not args:
                raise self.fail(f"wrong number of args for {name}: want at least 1", pos)
            return "(" + f" {name} ".join(args) + ")"
        helper, arity = _FUNCTIONS[name]
        if arity is not None and len(args) != arity:
            raise self.fail(f"wrong number of args for {name}: want {arity} got {len(args)}", pos)
        return f"{helper}({', '.join(args)})"

    def operands(self, tokens: list[_Token]) -> list[tuple[str, int]]:
        """Split a command into operands: a term and the fields chained right after it."""
        result: list[tuple[str, int]] = []
        index = 0
        while index < len(tokens):
            token = tokens[index]
            expr, index, path = self.term(tokens, index)
            while (
                index < len(tokens) and tokens[index].kind == "field" and not tokens[index].spaced
            ):
                field = tokens[index].text[1:]
                self.check_field(field, tokens[index].pos)
                expr = f"go_field({expr}, {_literal(field)})"
                path = (*path, field) if path is not None else None
                index += 1
            if path:
                self.references.add(path)
            result.append((expr, token.pos))
        return result

    def term(self, tokens: list[_Token], index: int) -> tuple[str, int, tuple[str, ...] | None]:
        token = tokens[index]
        kind = token.kind
        root = self.dots[-1] == _ROOT_DOT
        if kind == "field":
            field = token.text[1:]
            self.check_field(field, token.pos)
            path = (field,) if root else None
            return f"go_field({self.dots[-1]}, {_literal(field)})", index + 1, path
        if kind == "dot":
            return self.dots[-1], index + 1, () if root else None
        if kind == "var":
            name = self.var(token)
            declared = index + 1 < len(tokens) and tokens[index + 1].kind == "declare"
            if name != _ROOT_DOT and name not in self.variables and not declared:
                raise self.fail(f'undefined variable "{token.text}"', token.pos)
            return name, index + 1, () if name == _ROOT_DOT else None
        if kind == "string":
            return _literal(_unquote(token.text, token.pos, self)), index + 1, None
        if kind == "number":
            return _number(token.text, token.pos, self), index + 1, None
        if kind == "ident":
            return self.ident(token), index + 1, None
        if kind == "lparen":
            depth, end = 0, index
            for end in range(index, len(tokens)):
                depth += {"lparen": 1, "rparen": -1}.get(tokens[end].kind, 0)
                if depth == 0:
                    break
            if depth:
                raise self.fail("unclosed left paren", token.pos)
            return f"({self.pipeline(tokens[index + 1 : end], token.pos)})", end + 1, None
        raise self.fail(f"unexpected {token.text!r} in operand", token.pos)

    def ident(self, token: _Token) -> str:
        name = token.text
        if name in ("true", "false"):
            return name
        if name == "nil":
            return "none"
        if name in _UNSUPPORTED:
            raise self.fail(
                f"function {name!r} is not supported in composite tool templates", token.pos
            )
        if name in _FUNCTIONS or name in _OPERATORS:
            return f"fn:{name}"
        if name in ("if", "else", "end", "range", "with"):
            raise self.fail(f"unexpected keyword {name!r} in command", token.pos)
        raise self.fail(f"function {name!r} not defined", token.pos)

    def check_field(self, name: str, pos: int) -> None:
        if name.startswith("__"):
            raise self.fail(f"field {name!r} is refused (dunder names are never data)", pos)


def _literal(text: str) -> str:
    """``text`` as a Jinja string literal in which only ``[A-Za-z0-9 _]`` appear unescaped."""
    out = []
    for char in text:
        if char.isascii() and (char.isalnum() or char in " _"):
            out.append(char)
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return "'" + "".join(out) + "'"


_GO_UNESCAPE = re.compile(r"\\(?:([abfnrtv\\'\"])|x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|"
                          r"U([0-9a-fA-F]{8})|([0-7]{3})|(.))")  # fmt: skip
_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
           "\\": "\\", "'": "'", '"': '"'}  # fmt: skip


def _unquote(token: str, pos: int, translator: _Translator) -> str:
    if token.startswith("`"):
        return token[1:-1].replace("\r", "")

    def one(match: re.Match[str]) -> str:
        simple, hex2, hex4, hex8, octal, bad = match.groups()
        if bad is not None:
            raise translator.fail(f"unknown escape sequence \\{bad}", pos)
        if simple:
            return _SIMPLE[simple]
        code = int(hex2 or hex4 or hex8 or "0", 16) if not octal else int(octal, 8)
        try:
            if 0xD800 <= code <= 0xDFFF:  # surrogate halves: no code points (nor in Go)
                raise ValueError(code)
            return chr(code)
        except (ValueError, OverflowError):  # \U escapes reach 0xFFFFFFFF, past a C int
            raise translator.fail("escape sequence is an invalid Unicode code point", pos) from None

    return _GO_UNESCAPE.sub(one, token[1:-1])


def _number(text: str, pos: int, translator: _Translator) -> str:
    clean = text.replace("_", "")
    try:
        value: float | int = (
            int(clean, 0)
            if not re.search(r"[.eE]", clean) or clean.lower().startswith(("0x", "-0x", "+0x"))
            else float(clean)
        )
    except ValueError:
        raise translator.fail(f"bad number syntax: {text!r}", pos) from None
    return f"({value!r})"


# ---------------------------------------------------------------------------------------------
# Compiled templates


@dataclass(frozen=True, eq=False)
class Template:
    """One compiled template. ``references`` are the root field paths it reads, such as
    ``("steps", "fetch", "output", "body")`` (for load-time checks of step references)."""

    source: str
    references: frozenset[tuple[str, ...]]
    _render: Callable[[dict[str, Any]], Iterator[str]]
    _expression: Callable[..., Any] | None

    def __eq__(self, other: object) -> bool:
        """Templates of the same source are the same (two loads of one file plan equal)."""
        return isinstance(other, Template) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)

    @property
    def is_single_expression(self) -> bool:
        return self._expression is not None

    def render(self, context: Mapping[str, Any]) -> str:
        """The rendered text (a missing value prints ``<no value>``)."""
        chunks: list[str] = []
        size = 0
        try:
            for chunk in self._render({_ROOT_DOT: context}):
                size += len(chunk)
                if size > MAX_OUTPUT_CHARS:
                    raise TemplateRuntimeError(
                        f"template output too large (more than {MAX_OUTPUT_CHARS} characters)"
                    )
                chunks.append(chunk)
        except TemplateRuntimeError:
            raise
        except (_JinjaError, TypeError, ValueError, ArithmeticError, RecursionError) as exc:
            raise TemplateRuntimeError(f"template failed: {type(exc).__name__}") from exc
        return "".join(chunks)

    def evaluate(self, context: Mapping[str, Any]) -> Any:
        """The value of a lone expression (possibly :data:`MISSING`), else the rendered text."""
        if self._expression is None:
            return self.render(context)
        try:
            value = self._expression(**{_ROOT_DOT: context})
        except TemplateRuntimeError:
            raise
        except (_JinjaError, TypeError, ValueError, ArithmeticError, RecursionError) as exc:
            raise TemplateRuntimeError(f"template failed: {type(exc).__name__}") from exc
        if isinstance(value, str) and len(value) > MAX_OUTPUT_CHARS:
            raise TemplateRuntimeError(
                f"template output too large (more than {MAX_OUTPUT_CHARS} characters)"
            )
        return value


def compile_template(source: str) -> Template:
    """Compile Go template ``source``; :class:`TemplateSyntaxError` says what and where."""
    if not isinstance(source, str):
        raise TemplateSyntaxError("a template must be a string", 1, 1)
    if len(source) > MAX_TEMPLATE_CHARS:
        raise TemplateSyntaxError(f"template longer than {MAX_TEMPLATE_CHARS} characters", 1, 1)
    translator = _Translator(source)
    if "\x00" in source:
        raise translator.fail("NUL character in template", source.index("\x00"))
    jinja_source = translator.translate()
    try:
        compiled = ENVIRONMENT.from_string(jinja_source)
        single = translator.single if translator.actions == 1 and not translator.has_text else None
        expression = (ENVIRONMENT.compile_expression(single, undefined_to_none=False)
                      if single else None)
    except _JinjaError as exc:  # a construct the translation let through by mistake
        raise TemplateSyntaxError(f"cannot compile template: {exc}", 1, 1) from exc
    except (SyntaxError, RecursionError) as exc:  # Python's limits on the code Jinja generates
        raise TemplateSyntaxError("cannot compile template: if/with/range blocks nested too "
                                  "deeply", 1, 1) from exc
    return Template(source, frozenset(translator.references), compiled.generate, expression)


# ---------------------------------------------------------------------------------------------
# Trees of templates (step arguments, default results are not templated)

# A Template, a read-only mapping or tuple of compiled values, or a JSON scalar.
CompiledValue = Any


def compile_value(raw: Any, *, _depth: int = 0) -> CompiledValue:
    """``raw`` JSON with every string compiled; an error's ``path`` names the bad string."""
    if _depth > _MAX_VALUE_DEPTH:
        raise TemplateSyntaxError(f"arguments nested deeper than {_MAX_VALUE_DEPTH}", 1, 1)
    if isinstance(raw, str):
        return compile_template(raw)
    if isinstance(raw, Mapping):
        out = {}
        for key, value in raw.items():
            try:
                out[str(key)] = compile_value(value, _depth=_depth + 1)
            except TemplateSyntaxError as exc:
                raise exc.within(f".{key}") from None
        return MappingProxyType(out)
    if isinstance(raw, (list, tuple)):
        items = []
        for i, value in enumerate(raw):
            try:
                items.append(compile_value(value, _depth=_depth + 1))
            except TemplateSyntaxError as exc:
                raise exc.within(f"[{i}]") from None
        return tuple(items)
    return raw


def expand_value(compiled: CompiledValue, context: Mapping[str, Any]) -> Any:
    """Evaluate a compiled tree; a lone expression naming a missing key drops its mapping entry
    (``None`` in a list)."""
    if isinstance(compiled, Template):
        return compiled.evaluate(context)
    if isinstance(compiled, Mapping):
        out = {}
        for key, value in compiled.items():
            expanded = expand_value(value, context)
            if expanded is not MISSING:
                out[key] = expanded
        return out
    if isinstance(compiled, tuple):
        return [None if v is MISSING else v for v in (expand_value(i, context) for i in compiled)]
    return compiled


def references_of(compiled: CompiledValue) -> Sequence[tuple[str, ...]]:
    """Every root field path read by the templates of a compiled tree."""
    if isinstance(compiled, Template):
        return sorted(compiled.references)
    if isinstance(compiled, Mapping):
        return [r for v in compiled.values() for r in references_of(v)]
    if isinstance(compiled, tuple):
        return [r for v in compiled for r in references_of(v)]
    return []
