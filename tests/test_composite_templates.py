"""Composite tool templates: the Go subset ToolHive uses, run in Jinja2's sandbox."""

from __future__ import annotations

import pytest

from vmcp_trio.composite.templates import (
    MISSING,
    TemplateRuntimeError,
    TemplateSyntaxError,
    compile_template,
    compile_value,
    expand_value,
    go_str,
)

CTX = {
    "params": {"count": 5, "repo": "a/b", "ratio": 2.0, "flag": True, "items": ["x", "y"]},
    "steps": {
        "s": {
            "status": "completed",
            "output": {
                "items": [1, 2],
                "text": '{"user": {"login": "octo"}, "papers": [{"id": "p1"}]}',
                "approval": "accept",
            },
        }
    },
}


def ev(source: str) -> object:
    return compile_template(source).evaluate(CTX)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # lone expressions keep their type
        ("{{.params.count}}", 5),
        ("{{ .params.flag }}", True),
        ("{{.steps.s.output.items}}", [1, 2]),
        ("{{json .steps.s.output.items}}", "[1,2]"),
        ('{{eq .steps.s.output.approval "accept"}}', True),
        ("{{(fromJson .steps.s.output.text).user.login}}", "octo"),
        ("{{(index (fromJson .steps.s.output.text).papers 0).id}}", "p1"),
        ("{{len .steps.s.output.items}}", 2),
        ("{{.steps.s.output.items | len}}", 2),
        ("{{quote .params.repo}}", '"a/b"'),
        ("{{.params.repo | quote}}", '"a/b"'),
        ('{{printf "%s#%d" .params.repo .params.count}}', "a/b#5"),
        ("{{and .params.flag .params.count}}", 5),
        ('{{or .params.absent "fallback"}}', "fallback"),
        ("{{not .params.flag}}", False),
        ('{{index .params "repo"}}', "a/b"),
        ("{{.timestamp}}", MISSING),
        # anything else is text, printed as Go prints
        ("n={{.params.count}}", "n=5"),
        ("r={{.params.ratio}}", "r=2"),
        ("{{.params.items}} and {{.params.flag}}", "[x y] and true"),
        ("at {{.timestamp}}", "at <no value>"),
        ("m={{.steps.s.output.items | len}}", "m=2"),
        ("{{range .params.items}}<{{.}}>{{else}}none{{end}}", "<x><y>"),
        ("{{range $i, $v := .params.items}}{{$i}}={{$v}};{{end}}", "0=x;1=y;"),
        ("{{range .params.absent}}x{{else}}none{{end}}", "none"),
        ("{{with .params.repo}}R={{.}}{{else}}-{{end}}", "R=a/b"),
        ("{{if .params.absent}}a{{else if .params.flag}}b{{else}}c{{end}}", "b"),
        ("{{$n := .params.count}}{{$n}}-{{$.params.repo}}", "5-a/b"),
        ("a  {{- 1 -}}  b", "a1b"),
        ("{{/* a comment */}}kept", "kept"),
        ("line\n{{.params.repo}}\n", "line\na/b\n"),
        ("{%raw%} {{.params.count}} {#x#}", "{%raw%} 5 {#x#}"),
    ],
)
def test_go_syntax_is_accepted(source: str, expected: object) -> None:
    assert ev(source) == expected


def test_go_printing() -> None:
    assert go_str({"b": [1, 2.5], "a": None}) == "map[a:<no value> b:[1 2.5]]"
    assert go_str(1e21) == "1e+21"
    assert go_str(False) == "false"


@pytest.mark.parametrize(
    ("source", "line", "column", "fragment"),
    [
        ('{{define "x"}}{{end}}', 1, 3, "'define' is not supported"),
        ('{{template "x"}}', 1, 3, "'template' is not supported"),
        ("{{range .a}}{{break}}{{end}}", 1, 15, "'break' is not supported"),
        ("a\n  {{foo .x}}", 2, 5, "function 'foo' not defined"),
        ("{{call .f 1}}", 1, 3, "function 'call' is not supported"),
        ("{{js .x}}", 1, 3, "function 'js' is not supported"),
        ("{{$x = 1}}", 1, 6, "assignment with '='"),
        ("{{if .x}}open", 1, 3, "has no {{end}}"),
        ("{{end}}", 1, 3, "unexpected {{end}}"),
        ("{{.x | .y}}", 1, 8, "can't give argument to non-function"),
        ("{{ .x }", 1, 7, "unexpected '}'"),
        ('{{"unterminated}}', 1, 3, "unterminated quoted string"),
        ("{{len}}", 1, 3, "wrong number of args for len"),
        # Go's parser refuses a variable used where it is not declared (its scope ends at the
        # {{end}} of its block, and a branch's at the next {{else}}): found by fuzz_templates,
        # these compiled and evaluated to a value that is no JSON (Jinja's Undefined)
        ("{{$x}}", 1, 3, 'undefined variable "$x"'),
        ("{{range $i, $v := .a}}{{end}}{{$v}}", 1, 32, 'undefined variable "$v"'),
        ("{{if .x}}{{$y := 1}}{{else}}{{$y}}{{end}}", 1, 31, 'undefined variable "$y"'),
        # also found by fuzz_templates: a \U escape past a C int was an OverflowError, and a
        # surrogate half (which Go refuses) made text that cannot be sent as JSON
        ('{{"\\Ucccccccc"}}', 1, 3, "invalid Unicode code point"),
        ('{{"\\ud83d\\ude00"}}', 1, 3, "invalid Unicode code point"),
    ],
)
def test_unsupported_constructs_name_their_position(
    source: str, line: int, column: int, fragment: str
) -> None:
    with pytest.raises(TemplateSyntaxError) as info:
        compile_template(source)
    assert (info.value.line, info.value.column) == (line, column)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__ }}",  # Jinja/Python-style escape: not Go at all
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{.params.__class__}}",
        "{{(quote .params.repo).__globals__}}",
        "{{ .params.__init__.__globals__ }}",
    ],
)
def test_sandbox_escapes_are_refused_at_compile_time(source: str) -> None:
    with pytest.raises(TemplateSyntaxError):
        compile_template(source)


def test_fields_are_keys_never_attributes() -> None:
    ctx = {"params": {"d": {"items": "the key"}}, "steps": {}}
    assert compile_template("{{.params.d.items}}").evaluate(ctx) == "the key"
    assert compile_template("{{.params.d.keys}}").evaluate(ctx) is MISSING
    with pytest.raises(TemplateRuntimeError, match="can't evaluate field upper in type string"):
        compile_template("{{.params.d.items.upper}}").evaluate(ctx)


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("{{.missing.x}}", "nil pointer evaluating .x"),
        ("{{fromJson .params.repo}}", "fromJson"),
        ("{{index .params.items 5}}", "index out of range"),
        ('{{lt 1 "a"}}', "incompatible types"),
        ('{{range "abc"}}{{end}}', "range can't iterate"),
    ],
)
def test_runtime_errors(source: str, fragment: str) -> None:
    with pytest.raises(TemplateRuntimeError, match=fragment):
        ev(source)


def test_bounds() -> None:
    with pytest.raises(TemplateSyntaxError, match="longer than"):
        compile_template("x" * 100_001)
    with pytest.raises(TemplateSyntaxError, match="nested deeper"):
        compile_template("{{" + "(" * 40 + "1" + ")" * 40 + "}}")
    big = {"params": {"s": "x" * 6_000_000}}
    with pytest.raises(TemplateRuntimeError, match="too large"):
        compile_template("{{.params.s}}{{.params.s}}").render(big)
    with pytest.raises(TemplateSyntaxError, match="NUL"):
        compile_template("a\x00b")


def test_bounds_found_by_fuzzing() -> None:
    """What fuzz_templates found: blocks nested past Python's own limits were a SyntaxError or
    RecursionError out of compile_template (a manifest that failed to load with a traceback,
    not a problem report); a ``printf`` width taken from the data made a string of that many
    characters before the output bound was checked (2 GB for ``%1999999999d``)."""
    for keyword, depth in (("range 1", 25), ("if 1", 150), ("with .a", 1000)):
        with pytest.raises(TemplateSyntaxError, match="nested too deeply"):
            compile_template(f"{{{{{keyword}}}}}" * depth + "{{end}}" * depth)
    assert compile_template("{{range 1}}" * 20 + "x" + "{{end}}" * 20).render({}) == "x"
    printf = compile_template("{{printf .params.format .params.count}}")
    with pytest.raises(TemplateRuntimeError, match="width or precision larger than 1000000"):
        printf.render({"params": {"format": "%1999999999d", "count": 1}})
    with pytest.raises(TemplateRuntimeError, match="width or precision larger than 1000000"):
        printf.render({"params": {"format": "%.99999999f", "count": 1.5}})
    with pytest.raises(TemplateRuntimeError, match="printf: output too large"):
        compile_template("{{printf .params.format" + " 1" * 11 + "}}").render(
            {"params": {"format": "%1000000d" * 11}})
    assert len(printf.render({"params": {"format": "%1000000d", "count": 1}})) == 1_000_000


def test_trees_of_templates() -> None:
    compiled = compile_value(
        {"n": "{{.params.count}}", "opt": "{{.params.absent}}", "list": ["{{.nope}}", 3],
         "nested": {"s": "r={{.params.repo}}"}, "literal": 7}
    )  # fmt: skip
    assert expand_value(compiled, CTX) == {
        "n": 5, "list": [None, 3], "nested": {"s": "r=a/b"}, "literal": 7,
    }  # fmt: skip
    with pytest.raises(TemplateSyntaxError) as info:
        compile_value({"a": {"b": ["ok", "{{foo}}"]}})
    assert info.value.path == ".a.b[1]"
    assert str(info.value).startswith(".a.b[1]: line 1, column 3")


def test_references_are_collected() -> None:
    template = compile_template('{{if eq .steps.a.output.x "y"}}{{.params.p}}{{end}}')
    assert template.references == {("steps", "a", "output", "x"), ("params", "p")}
