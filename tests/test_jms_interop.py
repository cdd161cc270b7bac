"""JMS applications on both sides of the connector, with the distributions' own JMS clients.

A JMS producer groups by JMSXGroupID and nothing else; the reader must keep each such group in
one Spark partition per batch and in order (on ActiveMQ Classic, whose STOMP frames do not carry
the group, by the group slots of read/slots.py). A JMS consumer must see the groups the
connector's writer set.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from clustermq.groups import bucket_for_group
from test_reader import assert_each_delivery_emitted_once, drain, new_queue

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

PER_GROUP = 2_000
BYTES_SIZE = 256
#: how long a JVM client may take on 2 shared cores (start of the JVM included)
CLIENT_TIMEOUT_S = 180.0
TEXT = re.compile(rb"test message: (\d+)")


@contextmanager
def jms_client(broker, work: Path, name: str, node: int, role: str, queue: str, count: int,
               **options: object) -> Iterator[subprocess.Popen[bytes]]:
    """The distribution's JMS client as a process, stopped by its pid on the way out."""
    argv = broker.cluster.jms_client(node, role, queue, count, **options)
    log = work / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=work)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def finish(proc: subprocess.Popen[bytes], log: Path, what: str) -> str:
    """Wait for a JVM client to end on its own; its output, asserting it succeeded."""
    try:
        rc = proc.wait(CLIENT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{what} still running after {CLIENT_TIMEOUT_S:.0f} s: "
                             f"{log.read_text(errors='replace')[-2000:]}") from None
    text = log.read_text(errors="replace")
    assert rc == 0, f"{what} exited {rc}: {text[-2000:]}"
    return text


def position(flavor: str, message_id: str, headers: dict[str, str], body: bytes) -> int:
    """The message's place in its producer's sequence, 0-based.

    Classic's JMS message id ends in the producer's sequence number (from 1); Artemis's STOMP
    message-id is an internal number, but its CLI producer sets the property ``count``.
    """
    if "count" in headers:
        return int(headers["count"])
    assert message_id.startswith("ID:"), (flavor, message_id, headers)
    return int(message_id.rsplit(":", 1)[1]) - 1


def test_jms_producer_groups_are_read_once_in_one_partition_in_order(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """Two JMS producers on two nodes (group gA: TextMessages on node 0, gB: BytesMessages on
    node 1, persistent): every message read once with its exact body, each group in one Spark
    partition per batch and in producer order at the sink; ``group_id`` is the group where the
    broker shows it over STOMP (Artemis) and empty where it does not (Classic)."""
    queue = new_queue("jms")
    started = time.monotonic()
    with ExitStack() as stack:
        text = stack.enter_context(jms_client(broker, tmp_path, "gA", 0, "producer", queue,
                                              PER_GROUP, group="gA"))
        raw = stack.enter_context(jms_client(broker, tmp_path, "gB", 1, "producer", queue,
                                             PER_GROUP, group="gB", body_size=BYTES_SIZE))
        finish(text, tmp_path / "gA.log", "JMS producer gA")
        finish(raw, tmp_path / "gB.log", "JMS producer gB")
    produced_s = time.monotonic() - started
    rows, progress = drain(spark, broker.reader_options(
        queue, numPartitions=3, maxMessagesPerTrigger=1500), tmp_path)
    print(f"\n[{broker.flavor}] 2 JMS producers x {PER_GROUP} in {produced_s:.1f} s, "
          f"read in {len(progress)} batches")

    collected = rows.select("message_id", "headers", "body", "group_id", "batch_id", "partition",
                            "row", "node").orderBy("batch_id", "row").collect()
    assert len(collected) == 2 * PER_GROUP
    assert_each_delivery_emitted_once(rows)
    seen: dict[str, list[int]] = {"gA": [], "gB": []}
    partitions: dict[tuple[str, int], set[int]] = {}
    nodes: dict[str, set[str]] = {"gA": set(), "gB": set()}
    for r in collected:
        body = bytes(r["body"])
        pos = position(broker.flavor, r["message_id"], r["headers"], body)
        matched = TEXT.fullmatch(body)
        group = "gA" if matched else "gB"
        if matched:
            assert int(matched.group(1)) == pos, (body, r["message_id"])
        else:
            assert body == b"." * BYTES_SIZE or len(body) == BYTES_SIZE, body[:40]
        seen[group].append(pos)
        partitions.setdefault((group, r["batch_id"]), set()).add(r["partition"])
        nodes[group].add(r["node"])
        expected_group = group if broker.flavor == "artemis" else None
        assert r["group_id"] == expected_group, (r["group_id"], r["headers"])
    for group, positions in seen.items():
        # once each, and in producer order by batch, then by sink position
        assert positions == list(range(PER_GROUP)), (
            f"{group}: {len(positions)} rows, first out of order at "
            f"{next((i for i, p in enumerate(positions) if p != i), None)}")
    split = {key: parts for key, parts in partitions.items() if len(parts) > 1}
    assert not split, f"groups split over partitions within a batch: {split}"
    print(f"[{broker.flavor}] (group, batch) -> partition: "
          f"{ {f'{g}@{b}': sorted(p) for (g, b), p in sorted(partitions.items())} }, "
          f"nodes {nodes}")
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_jms_consumer_sees_the_writers_groups(spark: SparkSession, broker, tmp_path: Path) -> None:
    """What the writer publishes with a ``group_id`` reaches a JMS consumer as a JMS group: a
    consumer with the selector ``JMSXGroupID='<group>'`` on the group's node receives exactly
    that group's messages, and the queue is empty afterwards."""
    queue = new_queue("jmsout")
    per_group = 500
    groups = ["gA", "gB"]
    rows = [(f"{g}-{i}", g) for g in groups for i in range(per_group)]
    (spark.createDataFrame(rows, "body string, group_id string").repartition(2)
     .write.format("clustermq").mode("append").options(**broker.reader_options(queue)).save())
    with ExitStack() as stack:
        consumers = {
            g: stack.enter_context(jms_client(
                broker, tmp_path, f"consumer-{g}", bucket_for_group(g, len(broker.cluster.nodes())),
                "consumer", queue, per_group, selector=f"JMSXGroupID='{g}'"))
            for g in groups
        }
        outputs = {g: finish(p, tmp_path / f"consumer-{g}.log", f"JMS consumer of {g}")
                   for g, p in consumers.items()}
    for g, text in outputs.items():
        assert f"Consumed: {per_group} messages" in text, text[-2000:]
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}
