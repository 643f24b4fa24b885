"""``--remote-auth-bearer-token-file`` kept current: the bearer token the remote is sent, re-read
when the file changes, so a rotated token (a Kubernetes Secret volume, a script's cron job) is
sent without a restart.

Rules it keeps:

* The file is read again when its modification time, size or inode changes (looked at every
  :data:`POLL_SECONDS`; a Secret volume swaps a symlink, which changes them), when the process
  asks (``vmcp proxy`` on SIGHUP: :meth:`BearerTokenFile.reload`), and when the remote answers 401
  or 403 to the token and the file changed since (the request is then sent once more).
* The next request sent after a re-read carries the new token; requests already sent keep theirs.
* A file that cannot be read, or is empty, keeps the token read before: one WARNING line, and
  the proxy goes on. The token itself is never logged.
"""

from __future__ import annotations

import logging
import os

import trio

from ..auth.caller import Caller
from ..runtime.supervisor import NamedTask

__all__ = ["POLL_SECONDS", "BearerTokenFile"]

log = logging.getLogger("vmcp.proxy")

POLL_SECONDS = 2.0
"""How often the file's modification time is looked at."""

_Stamp = tuple[int, int, int] | None


class BearerTokenFile:
    """The credential of ``--remote-auth-bearer-token-file`` (a
    :class:`~.credentials.RemoteCredential`)."""

    def __init__(self, path: str, token: str) -> None:
        self.path = path
        self._authorization = f"Bearer {token}"
        self._stamp = self._look()

    def __repr__(self) -> str:
        return f"BearerTokenFile({self.path!r}, <token>)"

    async def headers(self, caller: Caller | None) -> list[tuple[str, str]]:
        return [("authorization", self._authorization)]

    async def rejected(self, status: int, challenge: str | None) -> bool:
        """The remote refused the token: worth one more try when the file changed since."""
        if await trio.to_thread.run_sync(self._look) == self._stamp:
            return False
        return await self.reload()

    async def reload(self) -> bool:
        """Read the file again; whether the token changed (see the module for a file that
        cannot be read)."""
        self._stamp, token, problem = await trio.to_thread.run_sync(self._read)
        flag = "--remote-auth-bearer-token-file"
        if token is None:
            log.warning("%s %s: %s; the token read before is still sent", flag, self.path,
                        problem)
            return False
        authorization = f"Bearer {token}"
        if authorization == self._authorization:
            log.info("%s %s re-read: the token is unchanged", flag, self.path)
            return False
        self._authorization = authorization
        log.info("%s %s re-read: the new token is sent from now on", flag, self.path)
        return True

    async def watch_forever(self, *,
                            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                            ) -> None:
        """Re-read the file whenever it changes (a supervised task)."""
        task_status.started()
        while True:
            await trio.sleep(POLL_SECONDS)
            if await trio.to_thread.run_sync(self._look) != self._stamp:
                await self.reload()

    def supervised(self) -> list[NamedTask]:
        return [("bearer token file", self.watch_forever)]

    def _look(self) -> _Stamp:
        try:
            found = os.stat(self.path)
        except OSError:
            return None
        return found.st_mtime_ns, found.st_size, found.st_ino

    def _read(self) -> tuple[_Stamp, str | None, str]:
        """The file's stamp, and its token or why there is none."""
        stamp = self._look()
        try:
            with open(self.path, encoding="utf-8") as source:
                token = source.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            return stamp, None, f"cannot read it: {getattr(exc, 'strerror', None) or exc}"
        if not token:
            return stamp, None, "it is empty"
        if any(c in token for c in "\r\n\0"):
            return stamp, None, "it holds more than one line"
        return stamp, token, ""
