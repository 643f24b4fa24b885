"""The store's key on first use: real ``vmcp secret`` processes on a fresh HOME with no variable.
Where the machine has no OS keyring (keyring's ``fail`` or ``null`` backend, forced here so that
the tests do the same on a desktop), the first ``set`` writes a key file (0600, folders 0700)
and says so in one line, once; where it has one (:class:`FileKeyring`, a backend of this module
that ``PYTHON_KEYRING_BACKEND`` loads in the child), the key goes there and no key file is
written. ``VMCP_SECRETS_KEY_FILE`` and ``VMCP_SECRETS_PASSWORD`` win when set."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from keyring.backend import KeyringBackend
from keyring.compat import properties

from vmcp_trio.secrets import os_keyring
from vmcp_trio.secrets.errors import DecryptError
from vmcp_trio.secrets.manager import SecretsManager
from vmcp_trio.secrets.private_files import create_private_file

from .helpers import ROOT

VALUE = "s3cr3t-first-use-value"
FAIL = "keyring.backends.fail.Keyring"
KEYRING_FILE_VAR = "VMCP_TEST_KEYRING"


class FileKeyring(KeyringBackend):
    """A real keyring backend for these tests: its entries in the JSON file that
    ``$VMCP_TEST_KEYRING`` names (not viable without it, so no other test can pick it)."""

    @properties.classproperty
    def priority(cls) -> float:
        if not os.environ.get(KEYRING_FILE_VAR):
            raise RuntimeError(f"only where {KEYRING_FILE_VAR} names its file")
        return 1.0

    @staticmethod
    def _path() -> Path:
        return Path(os.environ[KEYRING_FILE_VAR])

    def _entries(self) -> dict[str, str]:
        path = self._path()
        return json.loads(path.read_text()) if path.exists() else {}

    def get_password(self, service: str, username: str) -> str | None:
        return self._entries().get(f"{service}/{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        entries = self._entries()
        entries[f"{service}/{username}"] = password
        self._path().write_text(json.dumps(entries))

    def delete_password(self, service: str, username: str) -> None:
        entries = self._entries()
        entries.pop(f"{service}/{username}")
        self._path().write_text(json.dumps(entries))


def fresh_environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A new user's environment: HOME and XDG_CONFIG_HOME of its own, no ``VMCP_*`` variable,
    and no OS keyring unless ``extra`` names one."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("VMCP_", "PYTHON_KEYRING"))}
    env |= {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
            "PYTHON_KEYRING_BACKEND": FAIL, **extra}
    return {key: value for key, value in env.items() if value}


def vmcp_secret(env: dict[str, str], *argv: str, stdin: str = "") -> tuple[int, str, str]:
    run = subprocess.run([sys.executable, "-m", "vmcp_trio", "secret", *argv], input=stdin,
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
                         check=False)
    return run.returncode, run.stdout, run.stderr


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("backend", "xdg"), [(FAIL, True), ("keyring.backends.null.Keyring",
                                                             False)])
def test_first_set_makes_a_private_key_file_and_says_where_once(
        tmp_path: Path, backend: str, xdg: bool) -> None:
    env = fresh_environment(tmp_path, PYTHON_KEYRING_BACKEND=backend,
                            XDG_CONFIG_HOME=str(tmp_path / "xdg") if xdg else "")
    config = tmp_path / "xdg" if xdg else tmp_path / "home" / ".config"
    key_file, store = config / "vmcp" / "secrets.key", config / "vmcp" / "secrets.json.enc"

    code, out, err = vmcp_secret(env, "set", "api-key", stdin=VALUE)
    assert (code, out) == (0, f"stored 'api-key' in {store}\n")
    assert err.count("\n") == 1 and err.startswith("vmcp secret: created the key file ")
    assert str(key_file) in err and "0600" in err and "no OS keyring" in err
    assert VALUE not in out + err
    assert _mode(key_file) == 0o600 and _mode(store) == 0o600
    for folder in (config / "vmcp", config):  # every folder made on the way is private
        assert _mode(folder) == 0o700
    key = key_file.read_text()
    assert len(key) == 65 and bytes.fromhex(key.strip())  # 32 random bytes, as hex
    assert json.loads(store.read_bytes())["kdf"] == {"name": "key-file"}

    assert vmcp_secret(env, "get", "api-key") == (0, VALUE + "\n", "")
    code, _, err = vmcp_secret(env, "set", "other", stdin="second")
    assert (code, err) == (0, "")  # the key exists: nothing to say
    assert key_file.read_text() == key
    assert vmcp_secret(env, "get", "other") == (0, "second\n", "")
    assert vmcp_secret(env, "get", "api-key") == (0, VALUE + "\n", "")


def test_a_real_keyring_keeps_the_key_and_no_key_file_is_written(tmp_path: Path) -> None:
    keyring_file = tmp_path / "keyring.json"
    env = fresh_environment(tmp_path, PYTHON_KEYRING_BACKEND=f"{__name__}.FileKeyring",
                            **{KEYRING_FILE_VAR: str(keyring_file)})
    folder = tmp_path / "xdg" / "vmcp"

    code, _, err = vmcp_secret(env, "set", "api-key", stdin=VALUE)
    assert code == 0, err
    header = json.loads((folder / "secrets.json.enc").read_bytes())["kdf"]
    assert header["name"] == "keyring"
    account = header["account"]
    assert err == (f"vmcp secret: keeping the key of {folder / 'secrets.json.enc'} in the OS "
                   f"keyring ({FileKeyring.name}, service vmcp, account {account})\n")
    assert not (folder / "secrets.key").exists()
    entries = json.loads(keyring_file.read_text())
    assert list(entries) == [f"vmcp/{account}"]
    assert len(bytes.fromhex(entries[f"vmcp/{account}"])) == 32
    assert VALUE not in keyring_file.read_text()

    assert vmcp_secret(env, "get", "api-key") == (0, VALUE + "\n", "")
    assert vmcp_secret(env, "set", "other", stdin="second")[::2] == (0, "")
    assert vmcp_secret(env, "get", "other") == (0, "second\n", "")
    assert not (folder / "secrets.key").exists()

    # the same file where there is no keyring, or one without the entry: a usage error
    code, out, err = vmcp_secret({**env, "PYTHON_KEYRING_BACKEND": FAIL}, "get", "api-key")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "OS keyring" in err and account in err
    keyring_file.write_text("{}")
    code, out, err = vmcp_secret(env, "get", "api-key")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "has no such entry" in err


def test_the_variables_win_over_the_key_made_on_first_use(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process (no OS keyring): the made key file seals the file until a variable is
    set; then the variable's key does, and the file needs it to open."""
    monkeypatch.setattr(os_keyring, "_real_backend", lambda: None)
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    store = tmp_path / "xdg" / "vmcp" / "secrets.json.enc"
    first = SecretsManager.from_environment(env)
    first.set("a", "value-a")
    assert first.new_key is not None and "secrets.key" in first.new_key

    with_password = {**env, "VMCP_SECRETS_PASSWORD": "a password"}
    manager = SecretsManager.from_environment(with_password)
    assert manager.get("a") == "value-a"  # the file's own key still opens it
    manager.set("b", "value-b")
    assert manager.new_key is None
    assert json.loads(store.read_bytes())["kdf"]["name"] == "scrypt"
    assert SecretsManager.from_environment(with_password).get("b") == "value-b"

    key = tmp_path / "explicit.key"
    key.write_bytes(os.urandom(32))
    both = {**with_password, "VMCP_SECRETS_KEY_FILE": str(key)}
    SecretsManager.from_environment(both).set("c", "value-c")
    assert json.loads(store.read_bytes())["kdf"] == {"name": "key-file"}
    only_key = SecretsManager.from_environment({**env, "VMCP_SECRETS_KEY_FILE": str(key)})
    assert only_key.get("c") == "value-c"


def test_a_store_sealed_with_the_made_key_file_opens_and_moves_to_another_key_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os_keyring, "_real_backend", lambda: None)
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    SecretsManager.from_environment(env).set("a", "value-a")  # sealed with the made key file
    key = tmp_path / "explicit.key"
    key.write_bytes(os.urandom(32))
    explicit = {**env, "VMCP_SECRETS_KEY_FILE": str(key)}
    manager = SecretsManager.from_environment(explicit)
    assert manager.get("a") == "value-a"
    manager.set("b", "value-b")  # now sealed with VMCP_SECRETS_KEY_FILE's key
    assert SecretsManager.from_environment(explicit).get("a") == "value-a"
    with pytest.raises(DecryptError):  # the made key file no longer opens it
        SecretsManager.from_environment(env).get("a")


def test_a_key_file_is_created_once_whoever_comes_second(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "secrets.key"
    assert create_private_file(path, b"first\n") is True
    assert create_private_file(path, b"second\n") is False
    assert path.read_bytes() == b"first\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["secrets.key"]
    assert _mode(path) == 0o600 and _mode(path.parent) == _mode(path.parent.parent) == 0o700
