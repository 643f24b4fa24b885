"""Run a command as the terminal's foreground job, so Ctrl-C reaches it and not `make`.

`make run` uses this: without it, Ctrl-C sends SIGINT to make as well, and make reports
"Interrupt" and exits 130 even though vmcp shut down cleanly. Here the command gets its own
process group, which becomes the terminal's foreground group while it runs; signals this
launcher receives are passed on; the launcher exits with the command's status. Without a
terminal (CI, a pipe) it simply runs the command and passes signals on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def main(argv: list[str]) -> int:
    try:
        tty = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        tty = None
    child = subprocess.Popen(argv, process_group=0)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda s, _f: child.send_signal(s))
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # we hand the terminal back from background
    if tty is not None:
        try:
            os.tcsetpgrp(tty, child.pid)
        except OSError:
            tty = None
    try:
        return child.wait()
    finally:
        if tty is not None:
            os.tcsetpgrp(tty, os.getpgrp())
            os.close(tty)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
