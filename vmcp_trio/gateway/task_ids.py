"""The Tasks extension through the gateway: the task ids clients see, and where they lead.

A backend that creates a task names it by its own id, unique only at that backend. The client
gets instead a *sealed* id (:class:`TaskIds`): the backend's name and its id, encrypted and
authenticated (AES-256-GCM, :mod:`vmcp_trio.auth.sealer`) with the task's owner (the caller's
identity: issuer and subject) as associated data. So the id

* routes: ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` go to the backend inside, with
  the backend's own id, from any session of the same identity (a client that reconnects, a
  2026-07-28 client that has no session at all) and, with a key shared by the replicas, from
  any replica; the gateway stores nothing per task;
* is opaque: it shows neither the backend nor its id;
* is the same each time: sealed deterministically (the nonce derived from what is sealed), so a
  status notification names the task by the very id its ``CreateTaskResult`` gave;
* cannot be forged or borrowed: an id made up, altered, or created for another identity does not
  open, and the client hears -32602 exactly as for an unknown id.

Only a backend that can say whose a task is may hand one out (:func:`owns_tasks_per_caller`): a
2026-07-28 link (each call carries its caller) whose server declared the extension, the only
kind a client's declaration is passed to. A task result or a status notification from any other
backend (a shared stdio process, a handshake session) is refused or dropped, never sealed: a
notification a shared process sends while no call is in flight would otherwise be sealed for
every session, and so open its task to every identity.

Anonymous callers share one identity, so their task ids are as private as their values are
secret (unguessable: the backend's id under encryption, with a 128-bit tag).

The key derives from the gateway's fleet secrets (``GatewayPlan.fleet_secrets``): every replica
opens the ids another gave out, and they still open after a restart. Without such secrets it is
random per process (a restart forgets the tasks in flight: their ids no longer open).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import orjson

from ..auth.sealer import Sealer, SealingError
from ..protocol.jsonrpc import Message, Notification
from ..protocol.tasks_extension import STATUS_NOTIFICATION, declares_tasks

__all__ = ["MAX_TASK_ID", "TaskIds", "owns_tasks_per_caller"]

MAX_TASK_ID = 2048
"""Longest task id accepted from a client (a sealed id of a backend id of up to about 1 KB)."""
_INFO = b"vmcp-trio task ids v1"


def owns_tasks_per_caller(stateless: bool, server_capabilities: object) -> bool:
    """Whether a backend link (its era, its server's capabilities) may hand out tasks."""
    return stateless and declares_tasks(server_capabilities)


def _context(owner: tuple[str, str]) -> str:
    return "\0".join(owner)


class TaskIds:
    def __init__(self, fleet_secrets: Sequence[bytes] = ()) -> None:
        self._sealer = Sealer(list(fleet_secrets) or [secrets.token_bytes(32)], info=_INFO)

    def seal(self, owner: tuple[str, str], backend: str, task_id: str) -> str:
        """The id a client sees for ``backend``'s task ``task_id``."""
        return self._sealer.seal(orjson.dumps([backend, task_id]), context=_context(owner),
                                 deterministic=True)

    def open(self, owner: tuple[str, str], sealed: object) -> tuple[str, str] | None:
        """``(backend, the backend's task id)`` of an id this gateway gave ``owner``; None for
        anything else."""
        if not isinstance(sealed, str) or len(sealed) > MAX_TASK_ID or not sealed.isascii():
            return None
        try:
            backend, task_id = orjson.loads(self._sealer.open(sealed, context=_context(owner)))
        except (SealingError, orjson.JSONDecodeError, ValueError, TypeError):
            return None
        if not isinstance(backend, str) or not isinstance(task_id, str):
            return None
        return backend, task_id

    def sealed_result(self, owner: tuple[str, str], backend: str,
                      result: dict[str, Any]) -> dict[str, Any]:
        """A backend's result with its ``taskId`` (if any) replaced by the sealed id."""
        task_id = result.get("taskId")
        if not isinstance(task_id, str):
            return result
        return {**result, "taskId": self.seal(owner, backend, task_id)}

    def sealed_notification(self, owner: tuple[str, str], backend: str,
                            message: Message) -> Message:
        """A backend's message, with the task id of a status notification sealed."""
        if not isinstance(message, Notification) or message.method != STATUS_NOTIFICATION:
            return message
        return Notification(message.method, self.sealed_result(owner, backend,
                                                                message.params or {}))
