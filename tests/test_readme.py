"""The README's and docs/'s commands work as written: every ``sh`` block of README.md and of each
page of docs/ runs, offline, from a folder that looks like a clone (``examples/`` and ``.venv/``
of this one), with a configuration and state folder of its own, no ``VMCP_*`` variable of the
caller's, no OS keyring, and this checkout's ``vmcp`` on ``PATH`` as an installed one would
be. A block that cannot run here (it needs a remote server, a relay, a real identity provider) is
marked ``text``: shown, not run. ``make run`` and ``make test`` are the two
commands CI and the quickstart tests already run; the client snippet runs against a quickstart
gateway started here (on a free port instead of 4483, the only change).

The pages also hold together: every relative link resolves (to a file, and to a heading of a
page when it names one; docs/architecture.md may be missing while it is being written), every
module path they name exists, the README names every command of the command line, and it stays
a door: at most 300 lines, leading with ``make run`` and ``make test``."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vmcp_trio.cli import build_parser

from .gateway_helpers import quickstart_docs
from .helpers import ROOT
from .serve_helpers import serving

PAGES = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
         for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
README = PAGES["README.md"]
SH_BLOCK = re.compile(r"```sh\n(.*?)```", re.S)
BLOCKS = [(page, number, match.group(1)) for page, text in PAGES.items()
          for number, match in enumerate(SH_BLOCK.finditer(text), 1)]
README_BLOCKS = [block for page, _, block in BLOCKS if page == "README.md"]
QUICKSTART_URL = "http://127.0.0.1:4483/mcp"
PENDING_PAGES = {"docs/architecture.md"}  # linked before it lands; checked like any once it does


def test_the_readme_is_a_door() -> None:
    assert len(README.splitlines()) <= 300
    first = README_BLOCKS[0]
    assert first.startswith("make run") and "\nmake test" in first


def test_the_pages_have_runnable_blocks() -> None:
    assert len(README_BLOCKS) >= 4
    assert not [f"{page} block {number}" for page, number, block in BLOCKS
                if "<" in block and "<<" not in block], "a placeholder in a block that runs"


@pytest.mark.parametrize("block", [
    pytest.param(block, id=f"{page}-{number}") for page, number, block in BLOCKS
    if not block.startswith("make ") and QUICKSTART_URL not in block])
def test_a_block_runs(block: str, tmp_path: Path) -> None:
    for name in ("examples", ".venv"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {key: value for key, value in os.environ.items() if not key.startswith("VMCP_")}
    env |= {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
            "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}  # never the OS keyring
    # `vmcp` as an installed package puts it on PATH: this checkout's, beside the interpreter
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]


async def test_the_readme_client_snippet_runs(tmp_path: Path) -> None:
    [snippet] = [b for b in README_BLOCKS if QUICKSTART_URL in b and "<<" in b]
    with serving(quickstart_docs(), tmp_path) as served:
        run = subprocess.run(["bash", "-euo", "pipefail", "-c",
                              snippet.replace(QUICKSTART_URL, served.url)], cwd=ROOT,
                             capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines()[0] == "2026-07-28"
    assert "'clock_add'" in run.stdout and "{'sum': 5}" in run.stdout


FENCED = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {slug(heading) for heading in HEADING.findall(FENCED.sub("", text))}


def broken_links(page: str, text: str) -> list[str]:
    broken = []
    for target in LINK.findall(FENCED.sub("", text)):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (ROOT / page).parent / path if path else ROOT / page
        name = resolved.resolve().relative_to(ROOT).as_posix()
        if not resolved.exists():
            if name not in PENDING_PAGES:
                broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(
                resolved.read_text(encoding="utf-8")):
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", PAGES)
def test_the_links_of_a_page_resolve(page: str) -> None:
    assert broken_links(page, PAGES[page]) == []


PATH = re.compile(r"\b((?:vmcp_trio|tests|bench|fuzz|scripts|deploy|examples)/[\w./-]*\w/?)")
MODULE = re.compile(r"\bvmcp_trio(?:\.\w+)+")


def names_a_module(dotted: str) -> bool:
    """``vmcp_trio.resources.plan.GatewayPlan``: a module, then at most one attribute."""
    parts = dotted.split(".")
    return any((ROOT.joinpath(*parts[:end]).with_suffix(".py").exists()
                or ROOT.joinpath(*parts[:end]).is_dir())
               for end in (len(parts), len(parts) - 1))


@pytest.mark.parametrize("page", PAGES)
def test_the_paths_a_page_names_exist(page: str) -> None:
    text = PAGES[page]
    assert [path for path in PATH.findall(text) if not (ROOT / path).exists()] == []
    assert [name for name in MODULE.findall(text) if not names_a_module(name)] == []


def commands(parser: argparse.ArgumentParser) -> list[str]:
    """The command line's commands, as their usage names them (``vmcp tunnel relay``)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += commands(sub) or [sub.prog]
    return found


def test_the_readme_names_every_command() -> None:
    parser, _ = build_parser()
    named = commands(parser)
    assert "vmcp proxy stdio" in named and "vmcp tunnel token" in named
    for command in named:  # `vmcp secret set|get|list|delete` names four
        *group, last = command.split()
        pattern = re.escape(" ".join(group)) + r" (?:[\w-]+\|)*" + re.escape(last) + r"\b"
        assert re.search(pattern, README), command
