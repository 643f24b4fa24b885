"""Install the system programs the tests run for real: Redis and Sentinel (Debian
`redis-server`, `redis-sentinel`), haproxy (the load balancer in front of the replicas), zsh
(whose completion of `vmcp` is tested as bash's is) and Chromium (the headless browser that
renders the status page).

Idempotent: when every binary is on PATH it prints nothing and exits 0. Otherwise it runs
`apt-get install` (and `apt-get update` only when the install fails without it), as root or
through `sudo -n`. Tests start their own servers on free ports, so any system service the
package started (Redis on 6379, Sentinel on 26379) is stopped again afterwards.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

PACKAGES = ["redis-server", "redis-sentinel", "haproxy", "zsh", "chromium"]
BINARIES = ["redis-server", "redis-sentinel", "redis-cli", "haproxy", "zsh", "chromium"]
SERVICES = [("redis-sentinel", 26379), ("redis-server", 6379)]


def _have_all() -> bool:
    return all(shutil.which(name) for name in BINARIES)


def _prefix() -> list[str] | None:
    """The command prefix that runs apt-get as root, or None when there is no way to."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo"):
        return ["sudo", "-n"]
    return None


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _run(prefix: list[str], args: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print("packages:", " ".join(args), flush=True)
    return subprocess.run([*prefix, *args], env=env, capture_output=True, text=True,
                          timeout=900, check=False)


def _stop_services(prefix: list[str], before: dict[int, bool]) -> None:
    """Stop whatever the package started on the default ports (nothing was listening before)."""
    for service, port in SERVICES:
        if before[port] or not _listening(port):
            continue
        print(f"packages: stopping the {service} service the package started on port {port}",
              flush=True)
        if shutil.which("systemctl") and os.path.isdir("/run/systemd/system"):
            subprocess.run([*prefix, "systemctl", "disable", "--now", service],
                           capture_output=True, check=False, timeout=60)
        elif shutil.which("service"):
            subprocess.run([*prefix, "service", service, "stop"], capture_output=True,
                           check=False, timeout=60)
        deadline = time.monotonic() + 10
        while _listening(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _listening(port):  # last resort: ask it to shut down
            subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"],
                           capture_output=True, check=False, timeout=30)
        if _listening(port):
            print(f"packages: warning: something still listens on 127.0.0.1:{port}", flush=True)


def main() -> int:
    if _have_all():
        return 0
    prefix = _prefix()
    if prefix is None:
        print(f"packages: some of {', '.join(PACKAGES)} are missing and this user "
              "cannot install them (not root, no sudo). Install the Debian packages "
              f"{' '.join(PACKAGES)} (apt-get install {' '.join(PACKAGES)}).", file=sys.stderr)
        return 1
    if not shutil.which("apt-get"):
        print(f"packages: some of {', '.join(PACKAGES)} are missing and there is "
              "no apt-get; install Redis 7 (redis-server, redis-sentinel, redis-cli), haproxy, "
              "zsh and Chromium by other means.",
              file=sys.stderr)
        return 1
    before = {port: _listening(port) for _, port in SERVICES}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]
    result = _run(prefix, install)
    if result.returncode != 0:
        update = _run(prefix, ["apt-get", "update"])
        if update.returncode != 0:
            print(f"packages: apt-get update failed:\n{update.stdout}{update.stderr}",
                  file=sys.stderr)
            return 1
        result = _run(prefix, install)
    if result.returncode != 0:
        print(f"packages: apt-get install failed:\n{result.stdout}{result.stderr}", file=sys.stderr)
        return 1
    _stop_services(prefix, before)
    if not _have_all():
        missing = [name for name in BINARIES if not shutil.which(name)]
        print(f"packages: installed {' '.join(PACKAGES)} but {', '.join(missing)} not on PATH "
              f"(PATH={os.environ.get('PATH', '')})", file=sys.stderr)
        return 1
    print(f"packages: installed {' '.join(PACKAGES)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
