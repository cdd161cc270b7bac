"""Shared fixtures: one local Spark session and one local broker cluster per test session."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def spark() -> Iterator["SparkSession"]:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Spark's Python workers must import test modules that define probe sources.
    paths = [str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("clustermq-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.streaming.stopActiveRunOnRestart", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator["LocalCluster"]:
    """A real 3-node ActiveMQ Classic network of brokers on dynamic loopback ports."""
    from clustermq.localcluster.cluster import LocalCluster

    local = LocalCluster(tmp_path_factory.mktemp("cluster"))
    try:
        local.up(nodes=3)
        yield local
    finally:
        local.down()


class Broker:
    """Test-side helpers around the live cluster: produce, depth, reader options."""

    def __init__(self, cluster: "LocalCluster") -> None:
        self.cluster = cluster

    @property
    def login(self) -> dict[str, str]:
        username, password = self.cluster.credentials
        return {"username": username, "password": password}

    def connection(self, queue: str):  # type: ignore[no-untyped-def]
        from clustermq.options import parse_connection_options

        return parse_connection_options({"brokers": self.cluster.brokers, "queue": queue, **self.login})

    def produce(
        self, queue: str, count: int, groups: int = 0, size: int = 200, prefix: str = "g",
        first_id: int = 0, nodes: list[int] | None = None,
    ) -> dict[str, int]:
        """Send with the plain stomp.py load generator (optionally to a subset of nodes)."""
        import dataclasses

        from clustermq.loadgen import LoadSpec, produce

        conn = self.connection(queue)
        if nodes is not None:
            conn = dataclasses.replace(conn, nodes=tuple(conn.nodes[i] for i in nodes))
        spec = LoadSpec(count=count, groups=groups, size=size, group_prefix=prefix, first_id=first_id)
        return produce(conn, spec)

    def depths(self, queue: str, timeout: float = 30.0) -> dict[str, int | None]:
        """Depth per node; ``None`` only for a node that is down.

        A statistics request to a running node can time out on a loaded machine; counting that
        node as empty once made a fault test see more acknowledgements than there were, so a
        running node is asked again until it answers.
        """
        import time

        from clustermq.depth import queue_depths

        username, password = self.cluster.credentials
        nodes = list(self.cluster.nodes())
        deadline = time.monotonic() + timeout
        while True:
            depths = queue_depths(nodes, queue, username, password)
            silent = [i for i, n in enumerate(nodes)
                      if depths.get(n.name) is None and self.cluster.is_running(i)]
            if not silent:
                return depths
            if time.monotonic() > deadline:
                raise AssertionError(f"running nodes {silent} gave no depth for {queue}: "
                                     f"{getattr(depths, 'errors', depths)}")
            time.sleep(0.2)

    def wait_depth_zero(self, queue: str, timeout: float = 30.0) -> dict[str, int | None]:
        """Acks are asynchronous frames: poll until every node reports an empty queue."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            depths = self.depths(queue)
            if all(d == 0 for d in depths.values()) or time.monotonic() > deadline:
                return depths
            time.sleep(0.2)

    def reader_options(self, queue: str, **extra: object) -> dict[str, str]:
        opts = {"brokers": self.cluster.brokers, "queue": queue, **self.login}
        opts.update({k: str(v) for k, v in extra.items()})
        return opts


@pytest.fixture(scope="session")
def broker(cluster: "LocalCluster") -> Broker:
    return Broker(cluster)


@pytest.fixture
def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
