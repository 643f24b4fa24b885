"""The Redis fixtures work: replication, a Sentinel failover, and password mode."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .fixtures.redis_cluster import (
    RedisError,
    redis_command,
    running_redis,
    running_redis_cluster,
)


def _wait_for(check: Callable[[], bool], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_single_redis(tmp_path: Path) -> None:
    with running_redis(tmp_path) as (host, port):
        assert host == "127.0.0.1"
        assert redis_command(port, "SET", "k", "v", "PX", 10_000) == "OK"
        assert redis_command(port, "GETDEL", "k") == "v"
        assert redis_command(port, "GET", "k") is None


def test_cluster_replicates_and_fails_over(tmp_path: Path) -> None:
    with running_redis_cluster(tmp_path) as cluster:
        assert cluster.master_name.startswith("vmcp-")
        assert cluster.sentinel_addrs() == [f"127.0.0.1:{p}" for p in cluster.sentinel_ports]
        assert cluster.current_master() == ("127.0.0.1", cluster.master_port)
        assert cluster.command(cluster.master_port, "SET", "greeting", "hello") == "OK"
        _wait_for(lambda: cluster.command(cluster.replica_port, "GET", "greeting") == "hello")
        with pytest.raises(RedisError, match="READONLY"):
            cluster.command(cluster.replica_port, "SET", "x", "1")

        started = time.monotonic()
        assert cluster.kill_master() == cluster.master_port
        host, port = cluster.wait_for_failover(cluster.master_port, timeout=15)
        elapsed = time.monotonic() - started
        assert (host, port) == ("127.0.0.1", cluster.replica_port)
        assert elapsed < 10, f"failover took {elapsed:.1f} s"
        assert cluster.command(port, "GET", "greeting") == "hello"
        assert cluster.command(port, "SET", "after", "failover") == "OK"

        cluster.restart_killed()
        assert cluster.command(cluster.master_port, "ROLE")[0] == "slave"
        _wait_for(lambda: cluster.command(cluster.master_port, "GET", "after") == "failover")
        assert cluster.current_master() == ("127.0.0.1", cluster.replica_port)


def test_cluster_with_password(tmp_path: Path) -> None:
    with running_redis_cluster(tmp_path, password="s3cret pass") as cluster:
        port = cluster.master_port
        with pytest.raises(RedisError, match="NOAUTH"):
            redis_command(port, "GET", "k")
        with pytest.raises(RedisError, match="WRONGPASS"):
            redis_command(port, "GET", "k", password="wrong")
        assert redis_command(port, "SET", "k", "v", password="s3cret pass") == "OK"
        assert redis_command(port, "AUTH", "default", "s3cret pass") == "OK"
        _wait_for(lambda: cluster.command(cluster.replica_port, "GET", "k") == "v")
        assert cluster.current_master() == ("127.0.0.1", port)


def test_cluster_pause_is_a_partition(tmp_path: Path) -> None:
    """A paused master is failed over, and once resumed it still takes writes for a while
    (Sentinel demotes it only after its next INFO period, ~10 s): the hazard clients must handle."""
    with running_redis_cluster(tmp_path) as cluster:
        old = cluster.pause_master()
        assert cluster.wait_for_failover(old, timeout=15) == ("127.0.0.1", cluster.replica_port)
        cluster.resume_paused()
        assert cluster.command(old, "ROLE")[0] == "master"
        assert cluster.command(old, "SET", "stale", "1") == "OK"
        assert cluster.command(cluster.replica_port, "GET", "stale") is None
