"""Priority backup for the writer (``priorityNodes``) on the session's 3-node cluster: rows go to
the preferred nodes while one is reachable, to the others only while none is, and back to the
preferred ones as soon as one returns. Placement is counted exactly per node.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from test_reader import drain, new_queue

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
