"""The task ids clients see (gateway/tasks.py) and the Tasks extension's wire rules
(protocol/tasks.py), with no I/O."""

from __future__ import annotations

from vmcp_trio.gateway.task_ids import TaskIds
from vmcp_trio.protocol.jsonrpc import Notification
from vmcp_trio.protocol.tasks_extension import (
    capabilities_for_backend,
    declares_tasks,
    is_task_result,
)

ALICE = ("https://issuer.example", "alice")
BOB = ("https://issuer.example", "bob")


def test_a_sealed_task_id_routes_back_and_shows_nothing() -> None:
    ids = TaskIds()
    sealed = ids.seal(ALICE, "billing", "task-7")
    assert ids.open(ALICE, sealed) == ("billing", "task-7")
    assert "billing" not in sealed and "task-7" not in sealed
    assert sealed.isascii() and sealed.isprintable()  # it travels in the Mcp-Name header
    assert ids.seal(ALICE, "billing", "task-7") == sealed  # one task, one id, each time
    assert ids.seal(BOB, "billing", "task-7") != sealed
    assert ids.seal(ALICE, "billing", "task-8")[:20] != sealed[:20]  # no nonce shared


def test_a_task_id_cannot_be_forged_borrowed_or_moved() -> None:
    ids = TaskIds()
    sealed = ids.seal(ALICE, "billing", "task-7")
    assert ids.open(BOB, sealed) is None                       # another user's task
    assert TaskIds().open(ALICE, sealed) is None               # another gateway's key
    key_id, _, body = sealed.partition(".")
    flipped = body[:10] + ("A" if body[10] != "A" else "B") + body[11:]
    assert ids.open(ALICE, f"{key_id}.{flipped}") is None      # altered
    for junk in ("task-7", "", "x.y", None, 7, {"id": 1}, "é.é", "a." + "A" * 5000):
        assert ids.open(ALICE, junk) is None


def test_replicas_with_the_fleet_secrets_open_each_others_ids() -> None:
    fleet = [b"s" * 32]
    sealed = TaskIds(fleet).seal(ALICE, "billing", "task-7")
    assert TaskIds(fleet).open(ALICE, sealed) == ("billing", "task-7")  # another replica
    assert TaskIds([b"t" * 32, *fleet]).open(ALICE, sealed) == ("billing", "task-7")  # rotated
    assert TaskIds([b"t" * 32]).open(ALICE, sealed) is None


def test_results_and_status_notifications_carry_the_sealed_id() -> None:
    ids = TaskIds()
    result = {"resultType": "task", "taskId": "t1", "status": "working"}
    sealed = ids.sealed_result(ALICE, "b", result)
    assert ids.open(ALICE, sealed["taskId"]) == ("b", "t1")
    assert sealed["status"] == "working" and result["taskId"] == "t1"
    note = ids.sealed_notification(ALICE, "b", Notification(
        "notifications/tasks", {"taskId": "t1", "status": "completed"}))
    assert isinstance(note, Notification) and note.params is not None
    assert note.params["taskId"] == sealed["taskId"]  # the id the client holds
    other = Notification("notifications/progress", {"taskId": "t1"})
    assert ids.sealed_notification(ALICE, "b", other) is other


def test_the_wire_rules() -> None:
    declared = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    assert declares_tasks(declared) and not declares_tasks({"extensions": []})
    assert not declares_tasks(None) and not declares_tasks({"tasks": {}})
    assert capabilities_for_backend(declared, declared) is declared
    assert capabilities_for_backend(declared, None) == {}
    plain = {"sampling": {}}
    assert capabilities_for_backend(plain, None) is plain
    assert is_task_result({"resultType": "task", "taskId": "t"})
    assert not is_task_result({"resultType": "task"})
    assert not is_task_result({"resultType": "complete", "taskId": "t"})
