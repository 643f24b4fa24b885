"""The secrets manager (vmcp_trio/secrets): `vmcp secret set|get|list|delete` driven through
`command.run` with in-memory streams, and the library API the proxy calls. The key made on
first use, the OS keyring and Secret references are tests/test_secrets_first_use.py's."""

from __future__ import annotations

import argparse
import getpass
import io
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from vmcp_trio.secrets import os_keyring
from vmcp_trio.secrets.command import configure_parser, run
from vmcp_trio.secrets.errors import (
    InvalidSecretName,
    SecretNotFound,
    SecretsError,
    SecretsUsageError,
)
from vmcp_trio.secrets.manager import SecretsManager
from vmcp_trio.secrets.names import env_variable

PASSWORD = "correct horse battery staple"
VALUE = "ghp_s3cr3t-Value-123"


@pytest.fixture(autouse=True)
def _no_os_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process never touches the OS keyring of the machine running the tests."""
    monkeypatch.setattr(os_keyring, "_real_backend", lambda: None)


def _environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        "HOME": str(tmp_path / "home"),
        "VMCP_SECRETS_FILE": str(tmp_path / "store" / "secrets.json.enc"),
        "VMCP_SECRETS_PASSWORD": PASSWORD,
    }
    env.update(extra)
    return {k: v for k, v in env.items() if v != ""}


def _secret(environ: dict[str, str], *argv: str, stdin: str | io.StringIO = ""
            ) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="vmcp secret")
    configure_parser(parser)
    args = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    stream = io.StringIO(stdin) if isinstance(stdin, str) else stdin
    code = run(args, stream, out, err, environ)
    return code, out.getvalue(), err.getvalue()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _one_error_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("vmcp secret: "), err
    assert "Traceback" not in err
    return err


def _file(environ: dict[str, str]) -> Path:
    return Path(environ["VMCP_SECRETS_FILE"])


# --- set, get, list, delete ------------------------------------------------------------------


def test_set_from_pipe_then_get_prints_exactly_the_value(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    code, out, err = _secret(env, "set", "github-token", stdin=VALUE + "\n")
    assert (code, err) == (0, "")
    assert VALUE not in out
    code, out, err = _secret(env, "get", "github-token")
    assert (code, out, err) == (0, VALUE + "\n", "")


def test_set_strips_exactly_one_trailing_newline(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    pem = "-----BEGIN KEY-----\nabc\n-----END KEY-----\n\n"
    assert _secret(env, "set", "pem", stdin=pem)[0] == 0
    assert _secret(env, "get", "pem")[1] == pem[:-1] + "\n"
    assert _secret(env, "set", "crlf", stdin="v\r\n")[0] == 0
    assert _secret(env, "get", "crlf")[1] == "v\n"
    assert _secret(env, "set", "bare", stdin="no-newline")[0] == 0
    assert _secret(env, "get", "bare")[1] == "no-newline\n"


def test_set_at_a_terminal_prompts_without_echo(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _environ(tmp_path)
    prompts: list[str] = []

    def fake_getpass(prompt: str, stream: object = None) -> str:
        prompts.append(prompt)
        return VALUE

    monkeypatch.setattr(getpass, "getpass", fake_getpass)
    code, out, err = _secret(env, "set", "token", stdin=_Terminal("never read\n"))
    assert code == 0
    assert prompts == ["Value of token: "]
    assert VALUE not in out + err
    assert _secret(env, "get", "token")[1] == VALUE + "\n"


def test_cancelling_the_prompt_stores_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(prompt: str, stream: object = None) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(getpass, "getpass", interrupted)
    env = _environ(tmp_path)
    code, _, err = _secret(env, "set", "token", stdin=_Terminal())
    assert code == 2
    assert "cancelled" in _one_error_line(err)
    assert not _file(env).exists()


def test_set_refuses_an_empty_value(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    code, _, err = _secret(env, "set", "empty", stdin="\n")
    assert code == 2
    assert "empty value" in _one_error_line(err)
    assert not _file(env).exists()


def test_set_refuses_a_value_on_the_command_line_without_repeating_it(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    code, out, err = _secret(env, "set", "token", VALUE, stdin="ignored\n")
    assert code == 2
    assert "standard input" in _one_error_line(err)
    assert VALUE not in out + err
    assert not _file(env).exists()


def test_list_shows_names_and_providers_never_values(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    assert _secret(env, "set", "github-token", stdin=VALUE)[0] == 0
    assert _secret(env, "set", "db.password", stdin="hunter2-db")[0] == 0
    env["VMCP_SECRET_ONLY_IN_ENV"] = "env-value-xyz"
    env["VMCP_SECRET_DB_PASSWORD"] = "env-db-override"
    code, out, err = _secret(env, "list")
    assert (code, err) == (0, "")
    for value in (VALUE, "hunter2-db", "env-value-xyz", "env-db-override"):
        assert value not in out
    rows = [line.split(None, 1) for line in out.splitlines()]
    assert rows == [
        ["ONLY_IN_ENV", "env (VMCP_SECRET_ONLY_IN_ENV)"],
        ["db.password", "env (VMCP_SECRET_DB_PASSWORD)"],
        ["github-token", "file"],
    ]


def test_list_with_nothing_stored_is_empty(tmp_path: Path) -> None:
    assert _secret(_environ(tmp_path), "list") == (0, "", "")


def test_delete(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    _secret(env, "set", "a", stdin="value-a")
    _secret(env, "set", "b", stdin="value-b")
    code, out, err = _secret(env, "delete", "a")
    assert (code, err) == (0, "")
    assert "value-a" not in out
    code, out, err = _secret(env, "get", "a")
    assert (code, out) == (1, "")
    assert "'a'" in _one_error_line(err)
    assert _secret(env, "get", "b")[1] == "value-b\n"
    code, _, err = _secret(env, "delete", "a")
    assert code == 1
    assert "no secret 'a'" in _one_error_line(err)


def test_delete_of_a_name_only_in_the_environment_says_where_it_is(tmp_path: Path) -> None:
    env = _environ(tmp_path, VMCP_SECRET_TOKEN="from-env")
    code, _, err = _secret(env, "delete", "token")
    assert code == 1
    assert "VMCP_SECRET_TOKEN" in _one_error_line(err)
    assert "from-env" not in err


def test_get_of_a_missing_secret_names_both_places(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    code, out, err = _secret(env, "get", "nope")
    assert (code, out) == (1, "")
    line = _one_error_line(err)
    assert "VMCP_SECRET_NOPE" in line
    assert str(_file(env)) in line


# --- the environment provider --------------------------------------------------------------


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    _secret(env, "set", "db.password", stdin="from-file")
    env["VMCP_SECRET_DB_PASSWORD"] = "from-env"
    assert _secret(env, "get", "db.password")[1] == "from-env\n"
    # an empty variable is no override
    env["VMCP_SECRET_DB_PASSWORD"] = ""
    assert _secret(env, "get", "db.password")[1] == "from-file\n"


def test_set_warns_when_a_variable_overrides_the_stored_value(tmp_path: Path) -> None:
    env = _environ(tmp_path, VMCP_SECRET_API_KEY="from-env")
    code, _, err = _secret(env, "set", "api-key", stdin="from-stdin")
    assert code == 0
    assert "VMCP_SECRET_API_KEY" in err and "overrides" in err
    assert "from-env" not in err and "from-stdin" not in err


def test_only_variables_that_a_name_reads_are_listed(tmp_path: Path) -> None:
    env = _environ(tmp_path, VMCP_SECRET_lower="x", VMCP_SECRET_="x", VMCP_SECRETS_FILE_X="x",
                   VMCP_SECRET_OK_1="x")
    assert _secret(env, "list")[1] == "OK_1  env (VMCP_SECRET_OK_1)\n"
    assert _secret(env, "get", "ok-1")[1] == "x\n"


def test_environment_alone_needs_no_key_even_with_a_file(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    _secret(env, "set", "other", stdin="x")
    del env["VMCP_SECRETS_PASSWORD"]
    env["VMCP_SECRET_TOKEN"] = "env-only"
    assert _secret(env, "get", "token") == (0, "env-only\n", "")


@pytest.mark.parametrize(("name", "variable"), [
    ("github-token", "VMCP_SECRET_GITHUB_TOKEN"),
    ("db.password", "VMCP_SECRET_DB_PASSWORD"),
    ("Mixed_Case.v2", "VMCP_SECRET_MIXED_CASE_V2"),
])
def test_variable_of_a_name(name: str, variable: str) -> None:
    assert env_variable(name) == variable


# --- keys: password, key file, none, wrong ----------------------------------------------------


def test_wrong_password_is_one_line_exit_1(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    _secret(env, "set", "token", stdin=VALUE)
    env["VMCP_SECRETS_PASSWORD"] = "not the password"
    for argv in (("get", "token"), ("list",), ("delete", "token")):
        code, out, err = _secret(env, *argv)
        assert (code, out) == (1, "")
        line = _one_error_line(err)
        assert "cannot decrypt" in line
        assert "wrong VMCP_SECRETS_PASSWORD or key file" in line
        assert VALUE not in line
    code, _, err = _secret(env, "set", "other", stdin="x")
    assert code == 1
    _one_error_line(err)
    env["VMCP_SECRETS_PASSWORD"] = PASSWORD
    assert _secret(env, "get", "token")[1] == VALUE + "\n"


def test_without_a_file_reads_and_delete_need_no_key_and_make_none(tmp_path: Path) -> None:
    env = _environ(tmp_path, VMCP_SECRETS_PASSWORD="")
    assert _secret(env, "get", "token")[0] == 1
    assert _secret(env, "list") == (0, "", "")
    assert _secret(env, "delete", "token")[0] == 1
    assert not (tmp_path / "home").exists()  # neither the file nor a key file was made


def test_no_key_with_an_existing_file_is_a_usage_error_for_reads(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    _secret(env, "set", "token", stdin=VALUE)
    del env["VMCP_SECRETS_PASSWORD"]
    for argv in (("get", "token"), ("list",)):
        code, out, err = _secret(env, *argv)
        assert (code, out) == (2, "")
        line = _one_error_line(err)
        assert "VMCP_SECRETS_PASSWORD" in line and "VMCP_SECRETS_KEY_FILE" in line


@pytest.mark.parametrize("encoding", ["raw", "hex"])
def test_key_file(tmp_path: Path, encoding: str) -> None:
    key = os.urandom(32)
    key_file = tmp_path / "key"
    key_file.write_bytes(key if encoding == "raw" else key.hex().encode() + b"\n")
    env = _environ(tmp_path, VMCP_SECRETS_PASSWORD="", VMCP_SECRETS_KEY_FILE=str(key_file))
    assert _secret(env, "set", "token", stdin=VALUE)[0] == 0
    assert _secret(env, "get", "token") == (0, VALUE + "\n", "")
    header = json.loads(_file(env).read_bytes())
    assert header["kdf"] == {"name": "key-file"}
    # another key does not open it
    key_file.write_bytes(os.urandom(32))
    code, _, err = _secret(env, "get", "token")
    assert code == 1
    assert "wrong VMCP_SECRETS_PASSWORD or key file" in _one_error_line(err)


def test_the_same_key_raw_or_hex_opens_the_same_file(tmp_path: Path) -> None:
    key = os.urandom(32)
    (tmp_path / "raw").write_bytes(key)
    (tmp_path / "hex").write_text(key.hex().upper())
    env = _environ(tmp_path, VMCP_SECRETS_PASSWORD="", VMCP_SECRETS_KEY_FILE=str(tmp_path / "raw"))
    _secret(env, "set", "token", stdin=VALUE)
    env["VMCP_SECRETS_KEY_FILE"] = str(tmp_path / "hex")
    assert _secret(env, "get", "token")[1] == VALUE + "\n"


@pytest.mark.parametrize("content", [b"", b"short", bytes(range(200, 231)), b"zz" * 32,
                                     b"ab" * 31], ids=["empty", "short", "31-bytes", "not-hex",
                                                       "31-hex-bytes"])
def test_a_bad_key_file_is_a_usage_error(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "key").write_bytes(content)
    env = _environ(tmp_path, VMCP_SECRETS_PASSWORD="", VMCP_SECRETS_KEY_FILE=str(tmp_path / "key"))
    code, _, err = _secret(env, "set", "token", stdin=VALUE)
    assert code == 2
    assert "VMCP_SECRETS_KEY_FILE" in _one_error_line(err)


def test_a_missing_key_file_is_a_usage_error(tmp_path: Path) -> None:
    env = _environ(tmp_path, VMCP_SECRETS_KEY_FILE=str(tmp_path / "nowhere"))
    code, _, err = _secret(env, "set", "token", stdin=VALUE)
    assert code == 2
    assert "cannot read VMCP_SECRETS_KEY_FILE" in _one_error_line(err)


def test_a_password_file_read_with_only_a_key_file_asks_for_the_password(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    _secret(env, "set", "token", stdin=VALUE)
    (tmp_path / "key").write_bytes(os.urandom(32))
    env["VMCP_SECRETS_KEY_FILE"] = str(tmp_path / "key")
    del env["VMCP_SECRETS_PASSWORD"]
    code, _, err = _secret(env, "get", "token")
    assert code == 2
    assert "sealed with a password: set VMCP_SECRETS_PASSWORD" in _one_error_line(err)
    # with both, the file opens, and the next write moves it to the key file
    env["VMCP_SECRETS_PASSWORD"] = PASSWORD
    assert _secret(env, "get", "token")[1] == VALUE + "\n"
    assert _secret(env, "set", "other", stdin="x")[0] == 0
    assert json.loads(_file(env).read_bytes())["kdf"] == {"name": "key-file"}
    del env["VMCP_SECRETS_PASSWORD"]
    assert _secret(env, "get", "token")[1] == VALUE + "\n"


# --- the file on disk ---------------------------------------------------------------------


def test_default_path_modes_and_no_clear_text(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "VMCP_SECRETS_PASSWORD": PASSWORD}
    assert _secret(env, "set", "github-token", stdin=VALUE)[0] == 0
    path = tmp_path / "xdg" / "vmcp" / "secrets.json.enc"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    data = path.read_bytes()
    assert VALUE.encode() not in data
    assert b"github-token" not in data  # names are sealed too
    assert PASSWORD.encode() not in data
    header = json.loads(data)
    assert header["format"] == "vmcp-secrets" and header["version"] == 1
    assert header["cipher"] == "AES-256-GCM"
    assert header["kdf"]["name"] == "scrypt"
    assert (header["kdf"]["n"], header["kdf"]["r"], header["kdf"]["p"]) == (2**15, 8, 1)
    assert SecretsManager.from_environment(env).path == path


def test_relative_xdg_config_home_is_ignored(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": "relative/dir"}
    assert (SecretsManager.from_environment(env).path
            == tmp_path / "home" / ".config" / "vmcp" / "secrets.json.enc")


def test_rewrite_keeps_other_secrets_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    _secret(env, "set", "a", stdin="value-a")
    first = json.loads(_file(env).read_bytes())
    _secret(env, "set", "b", stdin="value-b")
    _secret(env, "set", "a", stdin="value-a2")
    second = json.loads(_file(env).read_bytes())
    assert first["nonce"] != second["nonce"]  # a fresh nonce per write
    assert first["kdf"]["salt"] == second["kdf"]["salt"]  # the same password keeps its salt
    assert _secret(env, "get", "a")[1] == "value-a2\n"
    assert _secret(env, "get", "b")[1] == "value-b\n"
    leftovers = sorted(p.name for p in _file(env).parent.iterdir())
    assert leftovers == ["secrets.json.enc", "secrets.json.enc.lock"]
    assert stat.S_IMODE(_file(env).stat().st_mode) == 0o600


def test_concurrent_writers_all_land(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    results: list[int] = []

    def writer(prefix: str) -> None:
        for i in range(3):
            results.append(_secret(env, "set", f"{prefix}{i}", stdin=f"v-{prefix}{i}")[0])

    threads = [threading.Thread(target=writer, args=(p,)) for p in "xyz"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0] * 9
    names = [row.split()[0] for row in _secret(env, "list")[1].splitlines()]
    assert names == [f"{p}{i}" for p in "xyz" for i in range(3)]


def test_an_altered_file_is_a_decrypt_error(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    _secret(env, "set", "token", stdin=VALUE)
    document = json.loads(_file(env).read_bytes())
    document["kdf"]["n"] = 2**14  # the header is authenticated too
    _file(env).write_text(json.dumps(document))
    code, _, err = _secret(env, "get", "token")
    assert code == 1
    assert "cannot decrypt" in _one_error_line(err)


@pytest.mark.parametrize("content", [
    b"not json at all",
    b'{"format": "something-else"}',
    b'{"format": "vmcp-secrets", "version": 99}',
    b'{"format": "vmcp-secrets", "version": 1, "cipher": "AES-256-GCM", '
    b'"kdf": {"name": "scrypt", "salt": "AAAAAAAAAAAAAAAAAAAAAA==", "n": 1073741824, "r": 8, '
    b'"p": 1}, "nonce": "AAAAAAAAAAAAAAAA", "ciphertext": "AAAAAAAAAAAAAAAAAAAAAA=="}',
])
def test_a_damaged_file_is_one_line_exit_1(tmp_path: Path, content: bytes) -> None:
    env = _environ(tmp_path)
    _file(env).parent.mkdir()
    _file(env).write_bytes(content)
    code, _, err = _secret(env, "get", "token")
    assert code == 1
    assert "cannot read" in _one_error_line(err)


# --- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a b", "x" * 129, "a/b/c", "/key", "secret/", "caf\u00e9",
                                  "new\nline", "../up", "s/" + "k" * 254])
def test_invalid_name_is_exit_2(tmp_path: Path, name: str) -> None:
    env = _environ(tmp_path)
    for argv in (("set", name), ("get", name), ("delete", name)):
        code, out, err = _secret(env, *argv, stdin=VALUE)
        assert (code, out) == (2, "")
        line = _one_error_line(err)
        assert "invalid secret name" in line
        if len(name) > 3:
            assert name not in line
    assert not _file(env).exists()


def test_longest_name_is_accepted(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    name = "A-z_0.9" * 18 + "xx"
    assert len(name) == 128
    assert _secret(env, "set", name, stdin="v")[0] == 0
    assert _secret(env, "get", name)[1] == "v\n"


# --- the library API ------------------------------------------------------------------------


def test_library_api(tmp_path: Path) -> None:
    env = _environ(tmp_path, VMCP_SECRET_FROM_ENV="env-value")
    secrets = SecretsManager.from_environment(env)
    secrets.set("github-token", VALUE)
    assert secrets.get("github-token") == VALUE
    assert secrets.get("from-env") == "env-value"
    assert secrets.list() == [("FROM_ENV", "env"), ("github-token", "file")]
    with pytest.raises(SecretNotFound) as caught:
        secrets.get("missing")
    message = str(caught.value)
    assert "'missing'" in message
    assert "VMCP_SECRET_MISSING" in message and str(_file(env)) in message
    assert isinstance(caught.value, SecretsError)
    assert secrets.delete("github-token") is True
    assert secrets.delete("github-token") is False
    with pytest.raises(InvalidSecretName):
        secrets.get("bad name")
    with pytest.raises(SecretsUsageError):
        secrets.set("empty", "")


def test_from_environment_defaults_to_the_process_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VMCP_SECRETS_FILE", str(tmp_path / "s.enc"))
    monkeypatch.setenv("VMCP_SECRET_PROCESS_WIDE", "pw-value")
    secrets = SecretsManager.from_environment()
    assert secrets.path == tmp_path / "s.enc"
    assert secrets.get("process-wide") == "pw-value"
