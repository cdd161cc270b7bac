"""Topics: reading through a durable subscription (every node's messages once, also those
published while the query was stopped, acknowledged on commit), and writing to one.

The traffic comes from the distributions' own JMS producers (``topic://``), one per node; the
reader's subscription lives where the dialect says (Classic: the first node, which the network
of brokers forwards every node's messages to; Artemis: every node, the cluster giving each
message to one of them). The writer's own rows show it publishes to the topic in both write
modes, and that a failed atomic job publishes nothing there.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from clustermq.broker.depth import connection_depths
from clustermq.broker.stomp_connection import close_connection, open_connection
from clustermq.options import ReadOptions
from test_jms_interop import finish, jms_client, position, producer_of
from waits import cluster_state, poll, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

PER_NODE = 200
#: how long a published marker may take to reach the query (a Classic bridge learns of the
#: subscription from an advisory, and a trigger runs every 200 ms)
MARKER_TIMEOUT_S = 60.0
#: how long the query may take to read what the producers sent
READ_TIMEOUT_S = 180.0
#: AvailableNow ends this long after the last message where the backlog cannot be measured
#: (Classic tells no subscription depth over STOMP); Artemis's run ends at the measured 600
IDLE_MS = 5000


def topic_options(broker: Any, topic: str, **extra: object) -> dict[str, str]:
    return {"brokers": broker.cluster.brokers, **broker.login, "topic": topic,
            **{k: str(v) for k, v in extra.items()}}


def start_query(spark: SparkSession, options: dict[str, str], checkpoint: Path,
                collected: list[dict[str, Any]], available_now: bool = False) -> StreamingQuery:
    """A ``processingTime`` query (or an AvailableNow run) that appends each row's node,
    offset, id and body to ``collected`` (foreachBatch runs in the test's process)."""

    def collect(batch: DataFrame, batch_id: int) -> None:
        for r in batch.select("node", "sequence", "message_id", "headers", "body").collect():
            collected.append({"node": r["node"], "sequence": r["sequence"], "body": bytes(r["body"]),
                              "message_id": r["message_id"], "headers": dict(r["headers"])})

    return (spark.readStream.format("clustermq").options(**options).load()
            .writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
            .trigger(**({"availableNow": True} if available_now else {"processingTime": "200 milliseconds"}))
            .start())


def running(query: StreamingQuery) -> None:
    """Fail at once, with the query's own error, when it has stopped."""
    assert query.isActive, query.exception()


def wait_started(query: StreamingQuery, timeout: float = 120.0) -> None:
    """Until the query finished a trigger: its source is connected and subscribed."""
    poll(lambda: running(query) or query.lastProgress, timeout, "the query's first trigger", 0.2)


def send_markers_until_read(broker: Any, topic: str, collected: list[dict[str, Any]]) -> int:
    """Publish a marker to each node (again every second) until the query read one from every
    node: then every node routes the topic to the subscription. Returns the markers sent."""
    pending = dict(enumerate(broker.cluster.nodes()))
    sent = 0

    def every_node_read() -> bool:
        nonlocal sent
        read = {row["body"] for row in collected}
        for index in [i for i in pending if f"marker {i}".encode() in read]:
            del pending[index]
        for index, node in pending.items():
            conn, _ = open_connection(node, broker.connection(topic))
            try:
                conn.send(f"/topic/{topic}", body=f"marker {index}", headers={"receipt": f"m{sent}"})
            finally:
                close_connection(conn)
            sent += 1
        return not pending

    wait_for(every_node_read, MARKER_TIMEOUT_S, "a marker from every node to reach the query", 1.0,
             explain=lambda: f"none from node(s) {sorted(pending)}\n{cluster_state(broker, topic)}")
    return sent


def publish_on_every_node(broker: Any, work: Path, topic: str, phase: str) -> None:
    """One JMS producer per node at once, PER_NODE persistent TextMessages each."""
    with ExitStack() as stack:
        procs = {i: stack.enter_context(jms_client(broker, work, f"{phase}-{i}", i, "producer", topic,
                                                   PER_NODE, topic=True))
                 for i in range(len(broker.cluster.nodes()))}
        for index, proc in procs.items():
            finish(proc, work / f"{phase}-{index}.log", f"JMS producer on node {index}")


def jms_keys(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(producer, place in its sequence) of every row a JMS producer sent."""
    return [(producer_of(r["message_id"], r["headers"]), position(r["message_id"], r["headers"]))
            for r in rows if not r["body"].startswith(b"marker")]


def wait_for_count(query: StreamingQuery, collected: list[dict[str, Any]], expected: int,
                   broker: Any, topic: str) -> None:
    def enough() -> bool:
        running(query)
        return len(jms_keys(collected)) >= expected

    wait_for(enough, READ_TIMEOUT_S, f"the query to read {expected} JMS messages", 0.5,
             explain=lambda: f"it read {len(jms_keys(collected))}\n{cluster_state(broker, topic)}")


def wait_acknowledged(query: StreamingQuery, timeout: float = 60.0) -> dict[str, Any]:
    """Until the progress says every node acknowledged all it delivered (``acknowledged`` up to
    ``offset``): a query stopped before its next trigger gives its last batch back to the broker
    (README, Delivery guarantees), and the next run would read it again. Returns the lag."""

    def lag() -> dict[str, Any]:
        running(query)
        progress = query.lastProgress
        return json.loads(progress["sources"][0]["latestOffset"] or "{}") if progress else {}

    def all_acknowledged() -> dict[str, Any] | None:
        current = lag()
        return current if current and all(v["acknowledged"] == v["offset"] for v in current.values()) else None

    return poll(all_acknowledged, timeout, "every delivery acknowledged", 0.5, explain=lambda: str(lag()))


@contextmanager
def subscribed(spark: SparkSession, broker: Any, topic: str, options: dict[str, str],
               checkpoint: Path) -> Iterator[tuple[StreamingQuery, list[dict[str, Any]], int]]:
    """A query on the topic's subscription, yielding (the query, its rows, the markers sent)
    once every node routes the topic to it (a marker from each was read); after the body, it
    waits until everything read is acknowledged, and it stops the query in any case."""
    collected: list[dict[str, Any]] = []
    query = start_query(spark, options, checkpoint, collected)
    try:
        wait_started(query)
        markers = send_markers_until_read(broker, topic, collected)
        yield query, collected, markers
        wait_acknowledged(query)
    finally:
        query.stop()


def test_a_durable_subscription_reads_every_node_once_and_keeps_what_is_published_while_stopped(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    """A query subscribes; a JMS producer per node publishes 200 (600 read, all acknowledged).
    The query stops; 600 more are published; an AvailableNow run from its checkpoint reads
    exactly those 600: each of the 1,200 once, and each run's rows are one contiguous range of
    offsets per node. On Artemis the subscription's queues then hold nothing."""
    topic = f"topic.{uuid.uuid4().hex[:8]}"  # the local Artemis cluster's topics: topic.# (multicast)
    options = topic_options(broker, topic, subscriptionName="everything")
    checkpoint = tmp_path / "checkpoint"
    with subscribed(spark, broker, topic, options, checkpoint) as (query, first, markers):
        publish_on_every_node(broker, tmp_path, topic, "live")
        wait_for_count(query, first, 3 * PER_NODE, broker, topic)
    publish_on_every_node(broker, tmp_path, topic, "stopped")
    depths = connection_depths(ReadOptions.parse(options).connection)
    if broker.flavor == "artemis":  # the subscription's queues on the nodes hold them
        assert depths.complete and depths.total == 3 * PER_NODE, (depths, depths.errors)
    else:  # Classic tells no subscription depth over STOMP: the probe says so per node
        assert set(depths.errors) == {n.name for n in broker.cluster.nodes()}, depths.errors
    second: list[dict[str, Any]] = []
    query = start_query(spark, {**options, "availableNowIdleTimeout": str(IDLE_MS)}, checkpoint, second,
                        available_now=True)
    if not query.awaitTermination(READ_TIMEOUT_S):
        query.stop()
        raise AssertionError(f"the AvailableNow run did not end in {READ_TIMEOUT_S:.0f} s; it read "
                             f"{len(jms_keys(second))}\n{cluster_state(broker, topic)}")
    assert query.exception() is None, query.exception()
    live, stopped = jms_keys(first), jms_keys(second)
    assert (len(live), len(set(live)), len(stopped), len(set(stopped)), len(set(live) & set(stopped))) == (
        600, 600, 600, 600, 0), (
        f"live: {len(live)} rows, {len(set(live))} distinct; while stopped: {len(stopped)} rows, "
        f"{len(set(stopped))} distinct; {len(set(live) & set(stopped))} read in both runs")
    assert len({p for p, _ in live}) == len({p for p, _ in stopped}) == 3
    for rows in (first, second):
        per_node: dict[str, list[int]] = {}
        for r in rows:
            per_node.setdefault(r["node"], []).append(r["sequence"])
        assert all(sorted(s) == list(range(min(s), min(s) + len(s))) for s in per_node.values()), {
            node: (len(s), len(set(s)), min(s), max(s)) for node, s in per_node.items()}
        if broker.flavor == "classic":  # the subscription lives on the first node only
            assert set(per_node) == {broker.cluster.nodes()[0].name}, sorted(per_node)
    assert sum(1 for r in first if r["body"].startswith(b"marker")) <= markers
    if broker.flavor == "artemis":
        depths = connection_depths(ReadOptions.parse(options).connection)
        assert depths.complete and depths.total == 0, (depths, depths.errors)


WRITTEN = 300
#: rows per group: consecutive rows, so that each group lies within one of the 3 partitions (the
#: writer keeps a partition's order; tasks publish side by side)
GROUP_ROWS = 20


def written_rows(spark: SparkSession, mode: str, fail_at: int | None = None) -> DataFrame:
    """WRITTEN rows over 3 partitions, bodies ``<mode>:<i>``, groups ``g<i // GROUP_ROWS>``; with
    ``fail_at`` the UDF raises on that row (in the last partition, so the first two stage theirs
    before the job fails)."""
    from pyspark.sql import functions as F

    @F.udf("string")
    def body(i: int) -> str:
        if i == fail_at:
            raise ValueError("injected failure on one row")
        return f"{mode}:{i}"

    return spark.range(0, WRITTEN, 1, 3).select(
        body("id").alias("body"),
        F.concat(F.lit("g"), F.floor(F.col("id") / GROUP_ROWS).cast("string")).alias("group_id"))


def test_the_writer_publishes_to_a_topic_atomically_or_directly_and_a_failed_job_publishes_nothing(
    spark: SparkSession, broker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the subscription in place (a query read a marker from every node, then stopped), an
    atomic write (staged, moved over STOMP), a direct write and an atomic write whose last task
    fails publish to the topic; queue_to_delta, reading the subscription (``--topic``,
    ``--subscription``) with ``availableNow``, writes exactly the 600 rows of the two good writes
    to its table, each once. On Artemis the subscription's queues held exactly those 600 before; on
    Classic (the subscription on one node, every group's messages from one node) each group
    arrives in the order it was written."""
    topic = f"topic.{uuid.uuid4().hex[:8]}"
    options = topic_options(broker, topic, subscriptionName="written")
    with subscribed(spark, broker, topic, options, tmp_path / "checkpoint"):
        pass
    writer = topic_options(broker, topic)
    written_rows(spark, "atomic").write.format("clustermq").mode("append").options(**writer).save()
    with pytest.raises(Exception) as err:
        written_rows(spark, "failed", fail_at=WRITTEN - 20).write.format("clustermq").mode("append") \
            .options(**writer).save()
    assert "injected failure on one row" in str(err.value)
    written_rows(spark, "direct").write.format("clustermq").mode("append") \
        .options(**writer, writeMode="direct").save()
    if broker.flavor == "artemis":  # the subscription's queues hold the two good writes
        depths = connection_depths(ReadOptions.parse(options).connection)
        assert depths.complete and depths.total == 2 * WRITTEN, (depths, depths.errors)
    for key, value in (("CLUSTERMQ_USERNAME", "username"), ("CLUSTERMQ_PASSWORD", "password")):
        monkeypatch.setenv(key, broker.login[value])
    table = tmp_path / "table"
    from clustermq.jobs import queue_to_delta as job

    args = job.parse_args([
        "--brokers", broker.cluster.brokers, "--topic", topic, "--subscription", "written",
        "--table", str(table), "--checkpoint", str(tmp_path / "job-checkpoint"), "--trigger", "availableNow",
        "--option", f"availableNowIdleTimeout={IDLE_MS}"])
    assert job.run(spark, args) == 0
    second = [r.asDict() for r in spark.read.format("delta").load(str(table)).collect()]
    bodies = [bytes(r["body"]).decode() for r in second]
    expected = {f"{mode}:{i}" for mode in ("atomic", "direct") for i in range(WRITTEN)}
    assert (len(bodies), set(bodies) == expected) == (2 * WRITTEN, True), (
        f"{len(bodies)} rows, {len(set(bodies))} distinct; missing {sorted(expected - set(bodies))[:10]}; "
        f"unexpected {sorted(set(bodies) - expected)[:10]}")
    if broker.flavor == "classic":
        order: dict[tuple[str, int], list[int]] = {}
        for r in sorted(second, key=lambda r: r["sequence"]):
            mode, i = bytes(r["body"]).decode().split(":")
            order.setdefault((mode, int(i) // GROUP_ROWS), []).append(int(i))
        out_of_order = {k: v for k, v in order.items() if v != sorted(v)}
        assert not out_of_order, out_of_order
