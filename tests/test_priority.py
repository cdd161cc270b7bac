"""Priority backup (``priorityNodes``) on the session's 3-node cluster. Writer: rows go to the
preferred nodes while one is reachable, to the others only while none is, and back to the
preferred ones as soon as one returns. Reader: consumes from the preferred nodes, from the other
only while none is reachable, and stops again once one is back. Counted exactly per node.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from test_reader import assert_each_delivery_emitted_once, drain, new_queue, start_collecting
from waits import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

ROWS = 600


def test_writer_uses_priority_nodes_falls_back_to_the_others_and_returns(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    cluster = broker.cluster
    nodes = [n.name for n in cluster.nodes()]
    preferred, other = nodes[:2], nodes[2]
    queue = new_queue("priority")
    options = broker.reader_options(queue, priorityNodes=",".join(preferred), connectTimeout=3000)

    def write(first: int) -> None:
        """ROWS rows in 6 tasks, every second one with a group id (grouped rows hash over the
        preferred nodes, the others follow loadBalancingPolicy)."""
        ids = spark.range(first, first + ROWS, numPartitions=6)
        group = F.when(F.col("id") % 2 == 0, F.concat(F.lit("g"), (F.col("id") % 7).cast("string")))
        (ids.select(F.col("id").cast("string").alias("body"), group.alias("group_id"))
         .write.format("clustermq").mode("append").options(**options).save())

    placement = []
    try:
        write(0)
        before = broker.settled_depths(queue)
        placement.append(("before", before))
        assert before[other] == 0, before
        assert before[preferred[0]] > 0 and before[preferred[1]] > 0, before  # balanced over both
        assert before[preferred[0]] + before[preferred[1]] == ROWS, before

        cluster.kill_node(0)
        cluster.kill_node(1)
        write(ROWS)
        during = broker.settled_depths(queue)
        placement.append(("both preferred down", during))
        assert during[other] == ROWS, during

        cluster.start_node(1)
        write(2 * ROWS)
        back = broker.settled_depths(queue)
        placement.append(("one preferred back", back))
        assert back[other] == ROWS, back
        assert back[preferred[1]] == before[preferred[1]] + ROWS, back
    finally:
        for i in (0, 1):
            if not cluster.is_running(i):
                cluster.start_node(i)
    print(f"\n[{broker.flavor}] placement by node: " + "; ".join(f"{what}: {d}" for what, d in placement))
    after = broker.settled_depths(queue)
    assert after[preferred[0]] == before[preferred[0]], after  # its store kept what it had
    rows, _ = drain(spark, broker.reader_options(queue), tmp_path)
    bodies = sorted(int(r[0]) for r in rows.select(F.col("body").cast("string")).collect())
    assert bodies == list(range(3 * ROWS))


def _state(query: StreamingQuery) -> dict[str, str]:
    """Each node's state in the reader's last progress (its per-node lag, lag.py): paused,
    disconnected or reading."""
    progress = query.lastProgress
    if not progress or not progress["sources"][0].get("latestOffset"):
        return {}
    return {n: "paused" if lag.get("paused") else "disconnected" if lag.get("disconnected") else "reading"
            for n, lag in json.loads(progress["sources"][0]["latestOffset"]).items()}


def test_reader_consumes_from_priority_nodes_falls_back_to_the_other_and_returns(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """Messages produced on all 3 nodes; a reader preferring 2: rows only from those while they
    are up (the third node's messages come through the network), from the third once both are
    SIGKILLed, from the preferred ones again once they are back (the third shown paused in the
    progress as soon as the first of them is connected). Every message read exactly once, every delivery emitted once, the queue empty."""
    cluster = broker.cluster
    nodes = [n.name for n in cluster.nodes()]
    preferred, other = nodes[:2], nodes[2]
    queue = new_queue("priority.read")
    per_node = 200
    options = broker.reader_options(queue, priorityNodes=",".join(preferred), connectTimeout=3000,
                                     initialReconnectDelay=200, maxReconnectDelay=1000,
                                     maxMessagesPerTrigger=150)
    collected: list[Row] = []
    reading = {n: "reading" for n in preferred}

    def produce_everywhere(first: int) -> None:
        for i in range(3):
            broker.produce(queue, per_node, nodes=[i], first_id=first + i * per_node)

    def read(ids: range, what: str) -> list[Row]:
        wait_for(lambda: {r.id for r in collected} >= set(ids), 60, what, interval=0.5)
        return [r for r in collected if r.id in ids]

    produce_everywhere(0)
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "300")
    query = start_collecting(spark, options, tmp_path, collected)
    timings = {}
    try:
        first = read(range(3 * per_node), "the messages of all 3 nodes")
        assert Counter(r.node for r in first).keys() <= set(preferred), Counter(r.node for r in first)
        wait_for(lambda: _state(query) == {**reading, other: "paused"}, 30, f"{other} shown paused")
        broker.wait_depth_zero(queue)  # every read message acknowledged before the kill

        killed_at = time.monotonic()
        cluster.kill_node(0)
        cluster.kill_node(1)
        wait_for(lambda: _state(query).get(other) == "reading", 30, f"{other} read")
        timings["to the other"] = time.monotonic() - killed_at
        broker.produce(queue, per_node, nodes=[2], first_id=3 * per_node)
        during = read(range(3 * per_node, 4 * per_node), "the other node's messages")
        assert {r.node for r in during} == {other}, Counter(r.node for r in during)
        wait_for(lambda: broker.depths(queue)[other] == 0, 30, f"{other} acknowledged")

        # One preferred node back is enough to pause the other; start_node waits for the mesh,
        # so the switch is measured from its return (0 s: it happened while the bridges formed).
        timings["preferred node start"] = cluster.start_node(0)
        back_at = time.monotonic()
        wait_for(lambda: _state(query).get(other) == "paused", 30, f"{other} paused again")
        timings["back to a preferred one"] = time.monotonic() - back_at
        assert _state(query)[preferred[0]] == "reading", _state(query)
        cluster.start_node(1)
        wait_for(lambda: _state(query) == {**reading, other: "paused"}, 30, "both preferred read")
        produce_everywhere(4 * per_node)
        after = read(range(4 * per_node, 7 * per_node), "the messages produced after the return")
        assert Counter(r.node for r in after).keys() <= set(preferred), Counter(r.node for r in after)
        assert query.isActive and query.exception() is None
        assert broker.wait_depth_zero(queue) == {n: 0 for n in nodes}
    finally:
        query.stop()
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
        for i in (0, 1):
            if not cluster.is_running(i):
                cluster.start_node(i)
    ids = Counter(r.id for r in collected)
    print(f"\n[{broker.flavor}] reader with {other} as backup: rows per node "
          f"{dict(Counter(r.node for r in collected))}; "
          + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    assert sorted(ids) == list(range(7 * per_node)) and set(ids.values()) == {1}, \
        {i: c for i, c in ids.items() if c > 1}
    frame = spark.createDataFrame(collected, "id int, node string, sequence long")
    assert_each_delivery_emitted_once(frame)
