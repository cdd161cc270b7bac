"""Clusters that change while queries run: nodes that join, discovery from a seed, a changed
``brokers`` list across restarts, nodes that leave.

These tests add and stop nodes, so they run on their own small cluster per flavor (module
scope), never on the session's: a 2-node cluster to which the join test adds a third.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Broker, cluster_flavors
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F
from test_reader import drain, loadgen_ids, new_queue, start_collecting
from test_reader_faults import wait_for

from clustermq.devtools.localcluster.cluster import LocalCluster

pytestmark = [pytest.mark.cluster, pytest.mark.spark]


@pytest.fixture(scope="module", params=cluster_flavors())
def members(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A 2-node cluster of the parametrised flavor, only for this module (nodes are added)."""
    local = LocalCluster(tmp_path_factory.mktemp(f"members-{request.param}"))
    try:
        local.up(nodes=2, flavor=request.param)
        yield Broker(local)
    finally:
        local.down()


def _offsets(checkpoint: Path) -> dict[str, int]:
    """The source offsets of the checkpoint's last batch."""
    latest = max((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    return json.loads(latest.read_text().splitlines()[-1])


def test_a_node_that_joins_a_running_query_is_read_from_and_written_to(
    spark: SparkSession, members: Broker, tmp_path: Path
) -> None:
    """``brokers`` names one seed, ``discovery=cluster``: the query reads both nodes from the
    start; a node added while it runs (``cluster add``) is read from without a restart (a new
    offset key from 0), each message exactly once; a batch write then publishes to all three
    nodes, and a restart from the same checkpoint drains them under the same keys."""
    cluster = members.cluster
    queue = new_queue("join")
    seed = cluster.nodes()[0].name
    options = members.reader_options(queue, brokers=seed, discovery="cluster")
    members.produce(queue, 200, nodes=[0, 1])
    collected: list[Row] = []
    query = start_collecting(spark, options, tmp_path, collected)
    try:
        wait_for(lambda: len(collected) >= 200, 60, "the backlog of both nodes")
        # the peer the seed named is read from the first batch on (its offset key is there)
        assert set(_offsets(tmp_path / "checkpoint")) == {n.name for n in cluster.nodes()}
        joined = cluster.add_node()
        added_at = time.monotonic()
        sent = 200
        while not any(r["node"] == joined.name for r in collected):
            assert time.monotonic() - added_at < 60, "the joined node was not read from in 60 s"
            members.produce(queue, 10, nodes=[2], first_id=sent)
            sent += 10
            time.sleep(0.5)
        read_after = time.monotonic() - added_at
        print(f"\n[{cluster.flavor}] joined node read from {read_after:.1f} s after it was up "
              f"({sent - 200} messages sent to it meanwhile)")
        wait_for(lambda: len(collected) >= sent, 60, "every message sent")
        time.sleep(1.0)  # a duplicate would come with the next batches
    finally:
        query.stop()
    ids = Counter(int(r["id"]) for r in collected)
    assert sorted(ids) == list(range(sent)) and set(ids.values()) == {1}, (
        f"{len(ids)} distinct ids of {sent}, repeated: {[i for i, c in ids.items() if c > 1][:10]}")
    assert joined.name in _offsets(tmp_path / "checkpoint")

    # the writer, given the seed alone, publishes to every node (roundRobin: a task per node)
    rows = spark.range(0, 300, 1, 3).select(F.col("id").cast("string").alias("body"))
    (rows.write.format("clustermq").mode("append")
     .options(**{k: v for k, v in options.items()})
     .option("loadBalancingPolicy", "roundRobin").save())
    depths = members.settled_depths(queue)
    assert sorted(depths.values()) == [100, 100, 100], depths

    # a restart from the same checkpoint reads all three nodes, the joined one under its key
    out, _ = drain(spark, options, tmp_path)
    bodies = Counter(r["body"].decode() for r in out.select("body").collect())
    assert sorted(int(b) for b in bodies) == list(range(300)) and set(bodies.values()) == {1}
    # (which node delivers a message is the brokers' choice: a Classic network forwards them to
    # the consumer that subscribed first) the joined node's key is the same as before
    assert set(_offsets(tmp_path / "checkpoint")) == {n.name for n in cluster.nodes()}
    assert sum(members.wait_depth_zero(queue).values()) == 0


def test_a_restart_with_a_changed_brokers_list_reads_on(
    spark: SparkSession, members: Broker, tmp_path: Path
) -> None:
    """One checkpoint, three runs with different ``brokers`` lists (a node added, then one
    removed): over the runs each message is read exactly once (a network may forward an unlisted
    node's messages to the listed ones, so what each run reads is the brokers' choice); the
    checkpoint holds exactly the listed nodes' keys."""
    cluster = members.cluster
    if len(cluster.nodes()) < 3:
        cluster.add_node()
    names = [n.name for n in cluster.nodes()][:3]
    queue = new_queue("relist")
    members.produce(queue, 300, nodes=[0, 1, 2])  # 100 per node
    drain(spark, members.reader_options(queue, brokers=",".join(names[:2])), tmp_path)
    assert set(_offsets(tmp_path / "checkpoint")) == set(names[:2])
    members.produce(queue, 60, nodes=[0, 1, 2], first_id=300)
    drain(spark, members.reader_options(queue, brokers=",".join(names[1:])), tmp_path)
    assert set(_offsets(tmp_path / "checkpoint")) == set(names[1:])
    every_run, _ = drain(spark, members.reader_options(queue, brokers=",".join(names)), tmp_path)
    ids = Counter(loadgen_ids(every_run))  # the three runs append to one sink
    assert sorted(ids) == list(range(360)) and set(ids.values()) == {1}, ids.most_common(3)
    assert sum(members.wait_depth_zero(queue).values()) == 0
