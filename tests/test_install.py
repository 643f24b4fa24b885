"""vmcp-trio installs like a tool: what `pip install .` and `pipx install .` give an operator.

A wheel of the project (built as pip builds it, from this checkout) is installed into a fresh
virtual environment with its runtime dependencies from the package index, and there:

* the console scripts ``vmcp`` and ``svc`` run, from the installed copy, not from this tree;
* the revision it reports is this checkout's commit, recorded in the wheel at build time;
* none of the test or lint tool chains came with it (pytest, mypy, ruff, the MCP SDK...).

And ``make run`` installs only the runtime, where ``make test`` installs the tool chains too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from .helpers import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def canonical(requirement: str) -> str:
    """The distribution's name of a requirement, normalised as PEP 503 says."""
    name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name[0]).lower()


RUNTIME = {canonical(r) for r in PYPROJECT["project"]["dependencies"]}
TOOL_CHAINS = {canonical(r) for extra in ("test", "lint")
               for r in PYPROJECT["project"]["optional-dependencies"][extra]} - RUNTIME


def clean_environment() -> dict[str, str]:
    """This process's environment without what would make the new one see this tree or venv."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    return {key: value for key, value in os.environ.items()
            if key not in drop and not key.startswith("VMCP_")}


def run(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(arg) for arg in args], cwd=cwd, env=clean_environment(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{args}: {done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a fresh virtual environment holding a wheel of this checkout."""
    base = tmp_path_factory.mktemp("install")
    pip = (sys.executable, "-m", "pip")
    run(*pip, "wheel", "--no-deps", "--quiet", "--wheel-dir", base / "wheels", ROOT, cwd=base)
    [wheel] = (base / "wheels").glob("vmcp_trio-*.whl")
    # No pip inside: this venv's pip installs into it, with the runtime dependencies only.
    run(sys.executable, "-m", "venv", "--without-pip", base / "venv", cwd=base)
    run(*pip, "--python", base / "venv" / "bin" / "python", "install", "--quiet", wheel,
        cwd=base)
    return base / "venv" / "bin"


def test_the_wheel_brings_the_runtime_and_no_tool_chain(installed: Path) -> None:
    listing = run(installed / "python", "-c",
                  "import importlib.metadata as m, json; "
                  "print(json.dumps([d.metadata['Name'] for d in m.distributions()]))",
                  cwd=installed)
    present = {canonical(name) for name in json.loads(listing)}
    assert {"vmcp-trio", *RUNTIME} <= present
    assert {"pytest", "mypy", "ruff", "mcp"} <= TOOL_CHAINS
    assert present & TOOL_CHAINS == set()


def test_the_installed_commands_run_and_know_their_revision(installed: Path) -> None:
    version = PYPROJECT["project"]["version"]
    for script in ("vmcp", "svc"):
        assert version in run(installed / script, "--version", cwd=installed).split()
    shown = run(installed / "python", "-c",
                "import vmcp_trio; from vmcp_trio.runtime.build import VERSION, revision; "
                "print(vmcp_trio.__file__, VERSION, revision())", cwd=installed).split()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    assert Path(shown[0]).is_relative_to(installed.parent), "imported from this tree"
    assert shown[1:] == [version, head]


def dry_run(target: str, tmp_path: Path) -> list[str]:
    """The pip installs ``make TARGET`` would run on a machine without ``.venv``."""
    out = subprocess.run(["make", "-C", str(ROOT), "-n", target, f"VENV={tmp_path / 'venv'}"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [line.split(" install ", 1)[1] for line in out.splitlines()
            if "-m pip install" in line]


def test_make_run_installs_the_runtime_only(tmp_path: Path) -> None:
    assert dry_run("run", tmp_path) == ["--quiet --upgrade pip", "--quiet -e ."]
    assert dry_run("test", tmp_path) == ["--quiet --upgrade pip", "--quiet -e .",
                                         "--quiet -e '.[test,lint]'"]


def test_the_docs_install_vmcp_and_call_it_so() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = readme[readme.index("\n## Install\n"):]
    install = install[:install.index("\n## ", 1)]
    assert "pipx install ." in install and "pip install ." in install
    assert "daemontools" in install and "`svc`" in install
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "examples").rglob("*.*")), ROOT / "deploy/kubernetes/README.md"]
    assert [page.relative_to(ROOT).as_posix() for page in pages
            if ".venv/bin/vmcp" in page.read_text(encoding="utf-8", errors="replace")] == []
