"""The reader's opt-in ``transport=amqp`` against JMS producers of the distributions themselves.

Over AMQP 1.0 both brokers show what STOMP hides: a JMS group's name (JMSXGroupID) on Classic
and the stable JMS message id on Artemis. The guarantees are those of the STOMP path: every
message once, a group in one partition per batch and in order, acknowledged on commit, and a
batch that failed before its commit read again, with the same ``message_id``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from test_jms_interop import BYTES_SIZE, TEXT, position, produce_groups
from test_reader import assert_each_delivery_emitted_once, drain, new_queue

pytestmark = [pytest.mark.cluster, pytest.mark.spark]


def amqp_options(broker, queue: str, **extra: object) -> dict[str, str]:
    return broker.reader_options(queue, transport="amqp", amqpBrokers=broker.cluster.amqp_brokers, **extra)


def test_amqp_reads_jms_groups_by_name_once_in_one_partition_in_order(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """Two JMS producers (gA: TextMessages on node 0, gB: BytesMessages on node 1): every
    message read once with its exact body, ``group_id`` the group's name on both flavors, a
    JMS message id (``ID:...``) in ``message_id``, each group in one partition per batch and in
    producer order at the sink."""
    queue = new_queue("amqpjms")
    groups = {"gA": (0, 1500, 0), "gB": (1, 1500, BYTES_SIZE)}
    produce_groups(broker, tmp_path, queue, groups)
    started = time.monotonic()
    rows, progress = drain(spark, amqp_options(broker, queue, numPartitions=3, maxMessagesPerTrigger=1000),
                           tmp_path)
    read_s = time.monotonic() - started
    collected = rows.select("message_id", "headers", "body", "group_id", "batch_id", "partition",
                            "row").orderBy("batch_id", "row").collect()
    assert len(collected) == 3000
    assert_each_delivery_emitted_once(rows)
    assert len({r["message_id"] for r in collected}) == 3000
    assert all(r["message_id"].startswith("ID:") for r in collected)
    seen: dict[str, list[int]] = {}
    partitions: dict[tuple[str, int], set[int]] = {}
    for r in collected:
        group, body = r["group_id"], bytes(r["body"])
        pos = position(r["message_id"], r["headers"])
        matched = TEXT.fullmatch(body)
        if group == "gA":
            assert matched and int(matched.group(1)) == pos, (body[:40], r["message_id"])
        else:
            assert group == "gB" and body == b"." * BYTES_SIZE, (group, body[:40])
        seen.setdefault(group, []).append(pos)
        partitions.setdefault((group, r["batch_id"]), set()).add(r["partition"])
    assert sorted(seen) == ["gA", "gB"]
    for group, positions in seen.items():
        assert positions == list(range(1500)), f"{group} out of order or incomplete"
    split = {key: parts for key, parts in partitions.items() if len(parts) > 1}
    assert not split, f"groups split over partitions within a batch: {split}"
    print(f"\n[{broker.flavor}] amqp: 3000 JMS-grouped messages read in {len(progress)} batches, "
          f"{read_s:.1f} s; partitions per (group, batch): {sorted(partitions.items())}")
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


class FailOnce:
    """``on_batch`` that fails batch 1 of the first run, after the sink wrote it: the batch is
    planned and emitted but never committed, so its messages were not acknowledged."""

    def __init__(self) -> None:
        self.failed = False

    def __call__(self, batch, batch_id: int) -> None:
        if batch_id == 1 and not self.failed:
            self.failed = True
            raise RuntimeError("the sink fails batch 1 once")


def test_amqp_message_id_is_the_same_on_a_redelivered_copy(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """A batch fails after the sink wrote it (a query of node 0); the restarted query reads its messages again
    (redelivered: the failed run never acknowledged them). Every copy carries the JMS message id
    of the first, so de-duplicating by ``message_id`` alone leaves exactly one row per message:
    on Artemis, unlike its STOMP ``message-id``, no producer-set id (``--id-header``) is needed."""
    queue = new_queue("amqpredeliver")
    count = 900
    produce_groups(broker, tmp_path, queue, {"gR": (0, count, 0)})
    # node 0 alone: on Classic the network would move a replayed batch's messages to a consumer
    # on another node, and the replay would wait replayTimeout for them on node 0
    options = amqp_options(broker, queue, maxMessagesPerTrigger=300) | {
        "brokers": broker.cluster.brokers.split(",")[0], "amqpBrokers": broker.cluster.amqp_brokers.split(",")[0]}
    fail = FailOnce()
    with pytest.raises(StreamingQueryException, match="fails batch 1 once"):
        drain(spark, options, tmp_path, on_batch=fail)
    assert fail.failed
    rows, _ = drain(spark, options, tmp_path)
    collected = rows.select("message_id", "body", "redelivered", "batch_id").collect()
    ids = [r["message_id"] for r in collected]
    copies = len(ids) - len(set(ids))
    assert all(i.startswith("ID:") for i in ids)
    assert len(set(ids)) == count, f"{len(set(ids))} distinct ids for {count} messages"
    assert copies >= 1, "the failed batch was not read again"
    bodies: dict[str, set[bytes]] = {}
    for r in collected:
        bodies.setdefault(r["message_id"], set()).add(bytes(r["body"]))
    assert all(len(b) == 1 for b in bodies.values()), "one message_id with different bodies"
    deduped = rows.dropDuplicates(["message_id"])
    assert deduped.count() == count
    positions = sorted(int(TEXT.fullmatch(bytes(r["body"])).group(1))  # type: ignore[union-attr]
                       for r in deduped.select("body").collect())
    assert positions == list(range(count))
    flagged = rows.where(F.col("redelivered")).count()
    print(f"\n[{broker.flavor}] amqp: {copies} rows read twice after a failed batch, "
          f"{flagged} flagged redelivered; {count} distinct message_ids, one per message")
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_amqp_lost_connection_emits_the_planned_and_the_broker_redelivers_them(broker, tmp_path: Path) -> None:
    """A reader of node 0 whose AMQP link runs through a TCP proxy that stalls (forwards
    nothing, closes nothing) once a batch is planned: the reader declares the node lost after its idle timeout
    (2.5 × ``heartbeat``), the planned messages are still emitted (not acknowledged: the ACK
    would need the dead link), the node is reconnected, and the broker redelivers them with the
    same ``message_id``; every message is read, the copies are exactly the planned ones."""
    from clustermq.options import ReadOptions
    from clustermq.read.consumer import ClusterConsumer
    from tcpproxy import TcpProxy
    from waits import wait_for

    queue, count, planned = new_queue("amqploss"), 300, 100
    produce_groups(broker, tmp_path, queue, {"gL": (0, count, 0)})
    state = broker.cluster.state()
    node0 = state.nodes[0]
    with TcpProxy(node0.host, node0.amqp_port) as proxy:
        # node 0 alone: a Classic network would forward the group to a consumer on another node
        options = ReadOptions.parse(amqp_options(broker, queue, prefetchPerNode=count, heartbeat=1000,
                                                 initialReconnectDelay=200, maxReconnectDelay=1000)
                                    | {"brokers": broker.cluster.brokers.split(",")[0],
                                       "amqpBrokers": proxy.address})
        consumer = ClusterConsumer(options)
        consumer.start()
        try:
            node = consumer.node_names[0]
            start = dict.fromkeys(consumer.node_names, 0)
            consumer.set_start(start)
            wait_for(lambda: len(consumer.subscriptions[0].available(0)) >= planned, 60, "node 0's deliveries")
            end = consumer.latest(start, planned, None)
            assert end[node] == planned and sum(end.values()) == planned
            proxy.stall()
            stalled = time.monotonic()
            wait_for(lambda: not consumer.subscriptions[0].connected, 10, "the stalled link to be declared lost",
                     interval=0.05)
            detected_s = time.monotonic() - stalled
            proxy.resume()
            first = [m.headers["message-id"] for _, msgs in consumer.take(start, end) for m in msgs]
            assert len(first) == planned and consumer.acknowledge(end) == 0
            seen, start = list(first), end

            def read_more() -> bool:
                nonlocal start
                end = consumer.latest(start, None, None)
                seen.extend(m.headers["message-id"] for _, msgs in consumer.take(start, end) for m in msgs)
                consumer.acknowledge(end)
                start = end
                return len(set(seen)) == count and len(seen) == count + planned

            wait_for(read_more, 60, f"{count} messages and {planned} copies")
        finally:
            consumer.stop()
    copies = {i for i in seen if seen.count(i) > 1}
    assert copies == set(first) and all(seen.count(i) == 2 for i in copies)
    assert all(i.startswith("ID:") for i in seen)
    print(f"\n[{broker.flavor}] amqp: stalled link lost after {detected_s:.2f} s (heartbeat 1 s); "
          f"{planned} planned messages emitted and redelivered with the same message_id")
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_a_batch_read_over_amqp_browses_every_node_and_consumes_nothing(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """``spark.read`` with ``transport=amqp`` (a copy-mode receiver per node; Artemis has no
    STOMP browse): every one of 3,000 messages once, each from the node that holds it, and every
    node's depth the same afterwards; with ``includeDeliveryCount`` the column too."""
    queue = new_queue("amqpbrowse")
    broker.produce(queue, 3000, groups=30)
    before = broker.settled_depths(queue)
    rows = (spark.read.format("clustermq").options(**amqp_options(broker, queue, includeDeliveryCount="true"))
            .load().select("node", F.col("headers")["loadgen_id"].alias("id"), "delivery_count").collect())
    per_node: dict[str, int] = {}
    for r in rows:
        per_node[r["node"]] = per_node.get(r["node"], 0) + 1
    assert sorted(int(r["id"]) for r in rows) == list(range(3000))
    assert {r["delivery_count"] for r in rows} == {1}  # never delivered before
    assert per_node == {name: d for name, d in before.items() if d}, (per_node, before)
    assert broker.settled_depths(queue) == before
