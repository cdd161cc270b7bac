"""Several queues in one source (``queue=a,b``): a browse of each, then a drain of all over STOMP
and one over AMQP, exactly.

The reader subscribes to every listed queue on every node's one connection (over AMQP: a receiver
per queue), so a node's delivery
counter, its prefetch window and the batch limits span the queues, and the ``destination``
column tells the rows apart. The batch read browses each queue of each node in a partition of
its own (over STOMP on Classic, over AMQP on Artemis, which has no STOMP browse). A pattern
(``orders.>``) is one subscription per node that Classic feeds from every matching queue, and a
query Artemis refuses before it subscribes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from test_amqp_transport import amqp_options
from test_reader import assert_each_delivery_emitted_once, drain, new_queue
from waits import cluster_state

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

#: messages per queue; the third queue is not in the source
SIZES = {"a": 600, "b": 400, "c": 100}
#: the loadgen ids of queue b start here, so an id says its queue too
B_FIRST_ID = 10_000
BATCH = 250
#: the AMQP drain's messages per queue, and where their ids start in each queue's range
AMQP_SIZE, AMQP_FIRST_ID = 300, 5_000
IDLE_MS = 20_000


def ids_per_destination(rows: list[Any]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in rows:
        out.setdefault(r["destination"], []).append(int(r["id"]))
    return {d: sorted(v) for d, v in out.items()}


def test_a_source_of_two_queues_browses_and_drains_both_exactly_and_leaves_a_third_alone(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    queues = {k: new_queue(f"several{k}") for k in SIZES}
    broker.produce(queues["a"], SIZES["a"], groups=20)
    broker.produce(queues["b"], SIZES["b"], first_id=B_FIRST_ID)
    broker.produce(queues["c"], SIZES["c"])
    source = f"{queues['a']},{queues['b']}"
    expected = {broker.destination(queues["a"]): list(range(SIZES["a"])),
                broker.destination(queues["b"]): list(range(B_FIRST_ID, B_FIRST_ID + SIZES["b"]))}
    before = {k: broker.settled_depths(q) for k, q in queues.items()}

    # the batch read: every message of both queues once, nothing consumed
    options = broker.reader_options(source) if broker.flavor == "classic" else amqp_options(broker, source)
    browsed = (spark.read.format("clustermq").options(**options).load()
               .select("destination", F.col("headers")["loadgen_id"].alias("id")).collect())
    assert ids_per_destination(browsed) == expected, (
        f"browsed {len(browsed)} rows: { {d: len(v) for d, v in ids_per_destination(browsed).items()} }")
    assert {k: broker.settled_depths(q) for k, q in queues.items()} == before

    # the streaming drain: both queues to the end, in batches that span them, the third untouched
    rows, progress = drain(spark, broker.reader_options(source, maxMessagesPerTrigger=BATCH,
                                                        availableNowIdleTimeout=IDLE_MS), tmp_path)
    assert_each_delivery_emitted_once(rows)
    read = rows.select("destination", F.col("headers")["loadgen_id"].alias("id")).collect()
    got = ids_per_destination(read)
    assert got == expected, (
        f"read {len(read)} rows: { {d: len(v) for d, v in got.items()} }; depths "
        f"{ {k: broker.depths(q) for k, q in queues.items()} }\n{cluster_state(broker, queues['a'])}")
    sizes = [p["numInputRows"] for p in progress]
    assert max(sizes) <= BATCH and len(sizes) >= (SIZES["a"] + SIZES["b"]) // BATCH, sizes
    mixed = rows.groupBy("batch_id").agg(F.countDistinct("destination").alias("n")).where("n = 2").count()
    assert mixed > 0, f"no batch held rows of both queues: batch sizes {sizes}"
    for k in ("a", "b"):
        assert broker.wait_depth_zero(queues[k]) == {n.name: 0 for n in broker.cluster.nodes()}

    # the same over AMQP: a receiver per queue on each node's connection
    broker.produce(queues["a"], AMQP_SIZE, first_id=AMQP_FIRST_ID)
    broker.produce(queues["b"], AMQP_SIZE, first_id=B_FIRST_ID + AMQP_FIRST_ID)
    rows, _ = drain(spark, amqp_options(broker, source, maxMessagesPerTrigger=BATCH,
                                        availableNowIdleTimeout=IDLE_MS), tmp_path / "amqp")
    assert_each_delivery_emitted_once(rows)
    got = ids_per_destination(rows.select("destination", F.col("headers")["loadgen_id"].alias("id")).collect())
    assert got == {broker.destination(queues["a"]): list(range(AMQP_FIRST_ID, AMQP_FIRST_ID + AMQP_SIZE)),
                   broker.destination(queues["b"]): list(range(B_FIRST_ID + AMQP_FIRST_ID,
                                                               B_FIRST_ID + AMQP_FIRST_ID + AMQP_SIZE))}, (
        f"over AMQP: { {d: len(v) for d, v in got.items()} }")
    for k in ("a", "b"):
        assert broker.wait_depth_zero(queues[k]) == {n.name: 0 for n in broker.cluster.nodes()}
    assert broker.settled_depths(queues["c"]) == before["c"]


#: messages in each queue of the pattern test: two it matches at different depths, one it does not
PATTERN_SIZES = {"eu": 300, "us.east": 200, "other": 50}


def test_a_queue_pattern_reads_every_matching_queue_on_classic_and_is_refused_on_artemis(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    """``queue=<base>.>`` on Classic: the depth, the browse and the drain cover ``<base>.eu`` and
    ``<base>.us.east`` exactly, and ``<base>-other`` (no segment of ``<base>``) stays as it was.
    On Artemis a wildcard SUBSCRIBE would create a queue that only collects copies from then on;
    the query fails naming that before it subscribes, and every message stays on its queue."""
    base = new_queue("pattern")
    queues = {k: (f"{base}-{k}" if k == "other" else f"{base}.{k}") for k in PATTERN_SIZES}
    first = {k: 20_000 * i for i, k in enumerate(PATTERN_SIZES)}  # an id says its queue
    for k, size in PATTERN_SIZES.items():
        broker.produce(queues[k], size, groups=10 if k == "eu" else 0, first_id=first[k])
    pattern = f"{base}.>"
    before = {k: broker.settled_depths(q) for k, q in queues.items()}
    options = broker.reader_options(pattern, maxMessagesPerTrigger=BATCH, availableNowIdleTimeout=IDLE_MS)

    if broker.flavor == "artemis":
        query = (spark.readStream.format("clustermq").options(**options).load().writeStream
                 .format("noop").option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        with pytest.raises(StreamingQueryException) as failed:
            query.awaitTermination(120)
        message = str(failed.value)
        assert f"cannot read the queue pattern '{pattern}'" in message and "copy" in message, message
        assert options["password"] not in message
        assert {k: broker.settled_depths(q) for k, q in queues.items()} == before
        return

    matched = {broker.destination(queues[k]): list(range(first[k], first[k] + PATTERN_SIZES[k]))
               for k in ("eu", "us.east")}
    total = sum(PATTERN_SIZES[k] for k in ("eu", "us.east"))
    assert sum(d or 0 for d in broker.depths(pattern).values()) == total, broker.depths(pattern)

    browsed = (spark.read.format("clustermq").options(**broker.reader_options(pattern)).load()
               .select("destination", F.col("headers")["loadgen_id"].alias("id")).collect())
    got = ids_per_destination(browsed)
    assert got == matched, f"browsed {len(browsed)} rows: { {d: len(v) for d, v in got.items()} }"
    assert {k: broker.settled_depths(q) for k, q in queues.items()} == before

    rows, _ = drain(spark, options, tmp_path)
    assert_each_delivery_emitted_once(rows)
    got = ids_per_destination(rows.select("destination", F.col("headers")["loadgen_id"].alias("id")).collect())
    assert got == matched, (
        f"drained { {d: len(v) for d, v in got.items()} }; depths "
        f"{ {k: broker.depths(q) for k, q in queues.items()} }\n{cluster_state(broker, queues['eu'])}")
    for k in ("eu", "us.east"):
        assert broker.wait_depth_zero(queues[k]) == {n.name: 0 for n in broker.cluster.nodes()}
    assert broker.settled_depths(queues["other"]) == before["other"]
