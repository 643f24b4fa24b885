"""Reading files: YAML and JSON, folders, and every way a file can be unreadable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vmcp_trio.resources.loading import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    ConfigPathError,
    expand_paths,
    load_paths,
    load_text,
)

GROUP = "apiVersion: toolhive.stacklok.dev/v1alpha1\nkind: MCPGroup\nmetadata:\n  name: {name}\n"


def only_problem(text: str | bytes, **kwargs: bool):  # type: ignore[no-untyped-def]
    docs, problems = load_text(text, "f.yaml", **kwargs)
    assert len(problems) == 1, problems
    return docs, problems[0]


def test_many_documents_numbered_from_one_counting_empty_ones() -> None:
    text = GROUP.format(name="a") + "---\n---\n" + GROUP.format(name="b")
    docs, problems = load_text(text, "f.yaml")
    assert problems == []
    assert [(d.index, d.body["metadata"]["name"]) for d in docs] == [(1, "a"), (3, "b")]


def test_positions_point_at_the_field() -> None:
    docs, _ = load_text(GROUP.format(name="a") + "spec:\n  description: x\n", "f.yaml")
    assert docs[0].position(("metadata", "name")) == (4, 3)
    assert docs[0].position(("spec", "description")) == (6, 3)
    # An unknown deeper path falls back to its deepest known prefix.
    assert docs[0].position(("spec", "description", "nope", 3)) == (6, 3)


def test_dates_stay_strings() -> None:
    docs, _ = load_text("a: 2025-06-18\nb: 2025-06-18T10:00:00Z\n", "f.yaml")
    assert docs[0].body == {"a": "2025-06-18", "b": "2025-06-18T10:00:00Z"}


def test_syntax_error_has_line_and_column_and_keeps_earlier_documents() -> None:
    text = GROUP.format(name="a") + "---\nkind: [unclosed\nspec: {}\n"
    docs, problem = only_problem(text)
    assert [d.index for d in docs] == [1]
    assert problem.rule == "yaml-syntax"
    assert problem.line == 7 and problem.column is not None
    assert problem.document == 2
    assert "is not valid YAML" in problem.message


def test_tab_indentation_is_a_clear_error() -> None:
    _, problem = only_problem("a:\n\tb: 1\n")
    assert problem.rule == "yaml-syntax" and problem.line == 2


def test_only_safe_tags() -> None:
    _, problem = only_problem("a: !!python/object/apply:os.system ['true']\n")
    assert problem.rule == "yaml-syntax"
    assert "could not determine a constructor" in problem.message


def test_duplicate_key_is_an_error_with_its_path() -> None:
    _, problem = only_problem("spec:\n  a: 1\n  a: 2\n")
    assert problem.rule == "duplicate-key"
    assert "spec.a" in problem.message and problem.line == 3


def test_merge_keys_are_not_duplicates() -> None:
    docs, problems = load_text("base: &b {x: 1}\nderived:\n  <<: *b\n  y: 2\n", "f.yaml")
    assert problems == []
    assert docs[0].body["derived"] == {"x": 1, "y": 2}


def test_alias_bomb_is_refused_before_expansion() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ",".join(f"*{prev}" for _ in range(9)) + "]")
    _, problem = only_problem("\n".join(lines) + "\n")
    assert problem.rule == "too-large"
    assert "alias bomb" in problem.message


def test_recursive_alias_is_refused() -> None:
    _, problem = only_problem("a: &a\n  b: *a\n")
    assert problem.rule == "recursive-alias"


def test_deep_nesting_is_refused() -> None:
    _, problem = only_problem("[" * 200 + "]" * 200 + "\n")
    assert problem.rule == "too-deep"
    deep = "a: " + "[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2) + "\n"
    _, problem = only_problem(deep)
    assert problem.rule == "too-deep"


def test_complex_keys_are_refused() -> None:
    _, problem = only_problem("? [a, b]\n: 1\n")
    assert problem.rule == "key-type"


def test_file_over_the_size_limit() -> None:
    _, problem = only_problem(b"#" * (MAX_FILE_BYTES + 1))
    assert problem.rule == "file-size"


def test_non_utf8_names_the_offset_and_line() -> None:
    _, problem = only_problem(b"a: 1\nb: caf\xe9\n")
    assert problem.rule == "encoding"
    assert "byte offset 11" in problem.message and problem.line == 2


def test_utf16_is_named() -> None:
    _, problem = only_problem("a: 1\n".encode("utf-16"))
    assert problem.rule == "encoding" and "UTF-16" in problem.message


def test_utf8_bom_is_accepted() -> None:
    docs, problems = load_text(b"\xef\xbb\xbfa: 1\n", "f.yaml")
    assert problems == [] and docs[0].body == {"a": 1}


def test_control_characters_are_a_yaml_error() -> None:
    _, problem = only_problem("a: 1\nb: b\x00c\n")
    assert problem.rule == "yaml-syntax"
    assert "#x0000 is not allowed" in problem.message
    assert (problem.line, problem.column) == (2, 5)


def test_json_object_array_and_errors() -> None:
    one = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}
    docs, problems = load_text(json.dumps(one), "f.json", json_syntax=True)
    assert problems == [] and docs[0].body == one
    docs, problems = load_text(json.dumps([one, one]), "f.json", json_syntax=True)
    assert [d.index for d in docs] == [1, 2]
    _, problem = only_problem('{"a": 1,\n "a": 2}', json_syntax=True)
    assert problem.rule == "duplicate-key"
    _, problem = only_problem('{"a": 1,\n "b": }', json_syntax=True)
    assert problem.rule == "json-syntax" and problem.line == 2 and problem.column == 7
    _, problem = only_problem("[" * 100_000, json_syntax=True)
    assert problem.rule in ("too-deep", "json-syntax")


def test_folders_are_read_recursively_in_order_skipping_hidden(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text(GROUP.format(name="b"))
    (tmp_path / "a.yml").write_text(GROUP.format(name="a"))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.json").write_text(json.dumps(
        {"apiVersion": "toolhive.stacklok.dev/v1alpha1", "kind": "MCPGroup",
         "metadata": {"name": "c"}}))
    (tmp_path / "notes.txt").write_text("not config")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "d.yaml").write_text(GROUP.format(name="d"))
    docs, problems = load_paths([tmp_path])
    assert problems == []
    assert [d.body["metadata"]["name"] for d in docs] == ["a", "b", "c"]
    assert docs[0].file == str(tmp_path / "a.yml")


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigPathError, match="no such file or folder"):
        expand_paths([tmp_path / "missing.yaml"])


def test_unreadable_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    target = tmp_path / "x.yaml"
    target.mkdir()  # a folder named like a file: read as a folder with no config files
    docs, problems = load_paths([target])
    assert docs == [] and problems == []
