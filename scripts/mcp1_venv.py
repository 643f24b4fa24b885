"""Create .venv-mcp1 with the 1.x MCP SDK (for interoperability tests with 1.x servers).

`mcp` 1.x and 2.x share a package name, so 1.x lives in its own venv; tests start 1.x servers
with its interpreter. A stamp makes a second run a no-op.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-mcp1"
REQUIREMENTS = ["mcp==1.30.0", "hypercorn==0.18.0", "trio==0.35.0"]


def main() -> int:
    stamp = VENV / ".stamp"
    wanted = " ".join(REQUIREMENTS)
    if stamp.exists() and stamp.read_text() == wanted:
        return 0
    print(f"mcp1: creating {VENV} with {wanted}", flush=True)
    venv.create(VENV, with_pip=True, clear=True)
    python = VENV / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *REQUIREMENTS], check=True,
                   timeout=900)
    stamp.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
