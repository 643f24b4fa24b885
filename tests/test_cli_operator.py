"""The command line's finish, as an operator meets it: ``vmcp version``, help that shows what a
user types, ``--log-level``, ``--name NAMESPACE/NAME``, YAML mistakes in one line, a backend
down at start named in the log, and shell completion. Real processes throughout: ``python -m
vmcp_trio`` for the commands, a real bash and zsh (installed by ``make test``) for completion.
(``vmcp proxy``'s signals and ``--log-level`` are in ``tests/test_proxy_signals.py``.)"""

from __future__ import annotations

import copy
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from vmcp_trio import __version__

from .gateway_helpers import quickstart_docs
from .helpers import ROOT, free_port
from .serve_helpers import serving


def vmcp(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vmcp_trio", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


# --- vmcp version --------------------------------------------------------------------------------

def test_version_prints_the_version_and_the_git_revision() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.strip()
    expected = f"vmcp {__version__} (revision {commit})\n"
    for args in (["version"], ["--version"]):
        run = vmcp(*args)
        assert (run.returncode, run.stdout, run.stderr) == (0, expected, ""), args


# --- help ----------------------------------------------------------------------------------------

COMMANDS = ["validate", "serve", "keys generate", "proxy", "proxy stdio", "proxy tunnel",
            "tunnel relay", "tunnel token", "secret set", "secret get", "secret list",
            "secret delete", "version", "completion"]


def test_help_shows_the_commands_as_typed_and_no_internals() -> None:
    top = vmcp("--help")
    assert top.returncode == 0
    assert "SUPPRESS" not in top.stdout and "proxy-" not in top.stdout
    listed = top.stdout.split("positional arguments:")[1]
    for command in ("proxy stdio", "proxy tunnel", "version", "completion"):
        assert f"    {command}" in listed, command
    unknown = vmcp("bogus")
    assert unknown.returncode == 2 and "proxy-" not in unknown.stderr
    assert "'proxy stdio'" in unknown.stderr
    for command in COMMANDS:
        run = vmcp(*command.split(), "--help")
        assert run.returncode == 0, command
        assert run.stdout.startswith(f"usage: vmcp {command} "), (command, run.stdout[:80])
        assert "SUPPRESS" not in run.stdout and "proxy-" not in run.stdout, command


# --- --log-level ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("command", "flags"), [
    ("serve", "-c examples"), ("proxy", "--target-uri http://x/ t"),
    ("proxy stdio", "--target-uri http://x/"),
    ("proxy tunnel", "--relay-url ws://x --tunnel-token-file f --target-uri http://x/ t"),
    ("tunnel relay", "--tokens f")])
def test_every_server_command_takes_log_level(command: str, flags: str) -> None:
    run = vmcp(*command.split(), *flags.split(), "--log-level", "loud")
    assert run.returncode == 2
    assert "argument --log-level: invalid choice: 'loud'" in run.stderr
    assert "{debug,info,warning,error}" in vmcp(*command.split(), "--help").stdout


async def test_serve_log_level_from_the_flag_and_from_vmcp_log_level(tmp_path: Path) -> None:
    """``warning`` keeps the warnings and drops the INFO lines and the access records;
    ``VMCP_LOG_LEVEL=error`` drops the warnings too; the operator's lines stay at every level."""
    for folder in ("flag", "env"):
        (tmp_path / folder).mkdir()
    with serving(quickstart_docs(), tmp_path / "flag", "--log-level", "warning") as served:
        await served.assert_serving()
    log = served.log()
    assert "WARNING vmcp.gateway: ANONYMOUS incoming auth" in log
    assert " INFO " not in log and "vmcp.access" not in log, log
    with serving(quickstart_docs(), tmp_path / "env", env={"VMCP_LOG_LEVEL": "ERROR"}) as served:
        await served.assert_serving()
    log = served.log()
    assert " INFO " not in log and "WARNING" not in log and "vmcp.access" not in log, log
    assert "[anonymous]" in log and "MCP endpoint:" in log  # the operator's lines


# --- --name NAMESPACE/NAME -----------------------------------------------------------------------

def two_namespaces() -> list[dict[str, Any]]:
    """The quickstart twice: in namespace ``default`` and in ``team``, same names."""
    team = copy.deepcopy(quickstart_docs())
    for doc in team:
        doc["metadata"]["namespace"] = "team"
    return quickstart_docs() + team


async def test_serve_name_takes_the_namespace_slash_name_form_it_lists(tmp_path: Path) -> None:
    config = tmp_path / "both.yaml"
    config.write_text(yaml.safe_dump_all(two_namespaces()))
    ambiguous = vmcp("serve", "-c", str(config), "--name", "quickstart")
    assert ambiguous.returncode == 1
    assert ("several VirtualMCPServers named 'quickstart'; choose one with --name "
            "NAMESPACE/NAME (found: default/quickstart, team/quickstart)") in ambiguous.stderr
    checked = vmcp("validate", "-c", str(config), "--name", "team/quickstart")
    assert checked.returncode == 0 and "VirtualMCPServer team/quickstart" in checked.stdout
    assert "default/quickstart" not in checked.stdout.split("valid:")[1]
    (tmp_path / "serve").mkdir()
    with serving(two_namespaces(), tmp_path / "serve", "--name", "team/quickstart") as served:
        await served.assert_serving()
    assert "VirtualMCPServer team/quickstart with 2 backend(s)" in served.log()


@pytest.mark.parametrize(("flags", "line"), [
    (["--name", "team/quickstart", "--namespace", "default"],
     "vmcp serve: error: --name team/quickstart and --namespace default name different "
     "namespaces"),
    (["--name", "a/b/c"], "vmcp serve: error: --name must be NAME or NAMESPACE/NAME, not 'a/b/c'"),
])
def test_a_name_that_cannot_be_is_one_line_and_exit_2(tmp_path: Path, flags: list[str],
                                                      line: str) -> None:
    config = tmp_path / "both.yaml"
    config.write_text(yaml.safe_dump_all(two_namespaces()))
    run = vmcp("serve", "-c", str(config), *flags)
    assert (run.returncode, run.stderr, run.stdout) == (2, line + "\n", "")


# --- YAML syntax errors --------------------------------------------------------------------------

INDENTATION = "check the indentation of this line against the one above"


@pytest.mark.parametrize(("text", "where", "found", "hint"), [
    ("kind: MCPGroup\nmetadata:\n  name: g\n   labels: {}\n", "4:10",
     "mapping values are not allowed here", INDENTATION),
    ("kind: MCPGroup\nmetadata:\n  name: g\n spec: {}\n", "4:2",
     "expected <block end>, but found '<block mapping start>'", INDENTATION),
    ("kind: MCPGroup\nmetadata:\n\tname: g\n", "3:1",
     "found character '\\t' that cannot start any token", "indent with spaces"),
    ("kind: MCPGroup\nmetadata: {name: 'g}\n", "2:18", "found unexpected end of stream",
     "this quote is not closed"),
])
def test_a_yaml_syntax_error_is_one_line_with_a_hint(tmp_path: Path, text: str, where: str,
                                                    found: str, hint: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    checked = vmcp("validate", "-c", str(config))
    served = vmcp("serve", "-c", str(config))
    for run, output in ((checked, checked.stdout), (served, served.stderr)):
        assert run.returncode == 1
        [line] = [ln for ln in output.splitlines() if "yaml-syntax" in ln]
        assert line.startswith(f"error: {config}:{where}: document 1: is not valid YAML: "
                               f"{found}; {hint}"), line
        assert "Traceback" not in run.stdout + run.stderr
        assert "<unicode string>" not in output and "while parsing" not in output
    assert served.stderr.splitlines()[1:] == ["vmcp: the configuration has 1 error(s); "
                                              "not starting"]


# --- a backend down at start ---------------------------------------------------------------------

def test_a_url_backend_down_at_start_is_a_warning_naming_it_and_why(tmp_path: Path) -> None:
    docs = quickstart_docs()
    port = free_port()
    docs.insert(1, {"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPServer",
                    "metadata": {"name": "faraway"},
                    "spec": {"groupRef": {"name": "quickstart"},
                             "url": f"http://127.0.0.1:{port}/mcp"}})
    with serving(docs, tmp_path) as served:
        deadline = time.monotonic() + 20
        while "backend clock is healthy" not in served.log() or \
                "backend faraway" not in served.log():
            assert time.monotonic() < deadline, served.log()
            time.sleep(0.1)
    [line] = [ln for ln in served.log().splitlines() if "backend faraway" in ln]
    assert " WARNING vmcp.health: backend faraway failed its first check (is unreachable: " \
           f"cannot connect to 127.0.0.1:{port}: connection refused)" in line, line


# --- shell completion ----------------------------------------------------------------------------

BASH_COMPLETE = r"""
source <("$VMCP" -m vmcp_trio completion bash)
function=$(complete -p vmcp | sed -E 's/.* -F ([^ ]+) .*/\1/')
complete -p svc > /dev/null
while IFS= read -r line; do
    read -ra COMP_WORDS <<< "$line"
    [[ $line == *' ' ]] && COMP_WORDS+=('')
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMP_LINE=$line COMP_POINT=${#line}
    COMPREPLY=()
    "$function" "${COMP_WORDS[0]}" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
    echo "${COMPREPLY[*]}"
done
"""

COMPLETIONS = {
    "vmcp se": "serve secret",
    "vmcp serve --con": "--config",
    "vmcp proxy st": "stdio",
    "vmcp proxy stdio --remote-auth-bearer-token-f": "--remote-auth-bearer-token-file",
    "vmcp serve --log-level ": "debug info warning error",
    "vmcp serve -c examples --log-format j": "json",
    "svc tunnel ": "relay token",
    "vmcp completion ": "bash zsh",
}


def test_bash_completion_completes_commands_flags_and_choices() -> None:
    run = subprocess.run(["bash", "--norc", "-c", BASH_COMPLETE], cwd=ROOT, text=True,
                         capture_output=True, timeout=60, check=False,
                         input="".join(f"{line}\n" for line in COMPLETIONS),
                         env={"PATH": "/usr/bin:/bin", "VMCP": sys.executable})
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == list(COMPLETIONS.values())


ZSH_COMPLETE = r"""
compdef() { print -r -- "compdef $*"; }
source <("$VMCP" -m vmcp_trio completion zsh)
compadd() { [[ $1 == -- ]] && shift; local -a found=(${(M)@:#${PREFIX}*});
            print -r -- "${(j: :)found}"; }
_describe() { local -a items=("${(@P)${@[-1]}}"); items=(${items%%:*});
              local -a found=(${(M)items:#${PREFIX}*}); print -r -- "${(j: :)found}"; }
_files() { print -r -- files; }
while IFS= read -r line; do
    words=(${(z)line}); [[ $line == *' ' ]] && words+=('')
    CURRENT=${#words}; PREFIX=${words[CURRENT]}
    _vmcp
done
"""


def test_zsh_completion_offers_the_same() -> None:
    lines = {**COMPLETIONS, "vmcp serve --config ": "files"}
    run = subprocess.run(["zsh", "-f", "-c", ZSH_COMPLETE], cwd=ROOT, text=True,
                         capture_output=True, timeout=60, check=False,
                         input="".join(f"{line}\n" for line in lines),
                         env={"PATH": "/usr/bin:/bin", "VMCP": sys.executable})
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["compdef _vmcp vmcp svc", *lines.values()]
