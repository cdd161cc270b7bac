"""What a broker does with a message that is delivered again and again and never acknowledged,
and what a query whose batch keeps failing sees of it.

This is what a query that keeps failing does to the messages it holds: each failed or killed run
closes its connections with the messages of its batch (and of its prefetch window) delivered and
not acknowledged, and the next run gets them again. Whether the broker ever gives up decides
whether such a message can leave the queue without reaching the table, so it is measured here,
per flavor, with a plain stomp.py client (docs/broker-behaviour.md, "Delivery attempts and the
dead-letter address"):

* Artemis counts every such delivery and, at ``max-delivery-attempts`` (10, its default, kept by
  the local cluster), moves the message to the dead-letter address (``DLQ``) with its original
  queue in ``_AMQ_ORIG_QUEUE``; no STOMP frame carries the count, only ``redelivered``.
* Classic over STOMP never gives up: the broker applies no redelivery limit of its own (the
  OpenWire JMS client's ``RedeliveryPolicy`` does, or a broker ``redeliveryPlugin``), so the
  message stays on the queue and ``ActiveMQ.DLQ`` gets nothing.

A query whose batch holds a poison message fails on every run, and each run's source closes its
connections in order. Over STOMP, Artemis counts one delivery of the batch's first message
only: every ten runs that message goes to ``DLQ`` (an innocent one, unless the poison is first),
and the query goes on failing. Over AMQP the reader settles the batch as failed deliveries:
Artemis counts every message of it, Classic none.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from test_artemis import close, plain_client, subscribe
from waits import dead_letters, poll

pytestmark = [pytest.mark.cluster]

#: the batch of the query-level test: every message, the poison one among them
BATCH_MESSAGES = 20
POISON_ID = 7

#: Artemis's default ``max-delivery-attempts``, which the local cluster keeps
ARTEMIS_MAX_DELIVERY_ATTEMPTS = 10
#: deliveries asked of Classic: past Artemis's limit, so a limit of Classic's own at the same
#: default would show
CLASSIC_ATTEMPTS = ARTEMIS_MAX_DELIVERY_ATTEMPTS + 2
NODE = 0


def deliver(broker: Any, queue: str, attempt: int, ack: str = "client-individual") -> Any:
    """One consumer that receives the message and disconnects, by default without an ACK (with
    ``ack="auto"`` the delivery consumes it); its frame."""
    conn, frames = plain_client(broker, NODE)
    try:
        subscribe(conn, frames, broker.destination(queue), f"attempt-{attempt}", ack)
        return poll(lambda: frames.messages() or None, 30, f"delivery {attempt + 1} of {queue}",
                    explain=lambda: f"depths {broker.depths(queue)}, dead letters "
                                    f"{broker.depths(dead_letters(broker))}")[0]
    finally:
        close(conn)


def node_depth(broker: Any, queue: str) -> int:
    return broker.depths(queue)[broker.cluster.nodes()[NODE].name] or 0


def take_dead_letter(broker: Any, queue: str) -> list[Any]:
    """The dead letters of ``queue`` on the node, consumed (and acknowledged) by a selector."""
    conn, frames = plain_client(broker, NODE)
    try:
        subscribe(conn, frames, broker.destination(dead_letters(broker)), "dead", "auto",
                  selector=f"_AMQ_ORIG_QUEUE = '{queue}'")
        return poll(frames.messages, 30, f"the dead letter of {queue}")
    finally:
        close(conn)


def test_a_message_never_acknowledged_is_dead_lettered_by_artemis_at_its_limit_and_kept_by_classic(
    broker: Any,
) -> None:
    queue = f"test.attempts.{uuid.uuid4().hex[:8]}"
    dead_before = node_depth(broker, dead_letters(broker))
    broker.produce(queue, 1, nodes=[NODE])
    attempts = ARTEMIS_MAX_DELIVERY_ATTEMPTS if broker.flavor == "artemis" else CLASSIC_ATTEMPTS
    frames = [deliver(broker, queue, i) for i in range(attempts)]

    flags = [f.headers.get("redelivered") for f in frames]
    ids = {f.headers["loadgen_id"] for f in frames}
    print(f"\n[{broker.flavor}] {attempts} deliveries of one message, redelivered flags {flags}")
    assert ids == {"0"}, f"other messages than the one produced were delivered: {ids}"
    assert flags[0] in (None, "false") and set(flags[1:]) == {"true"}, flags

    if broker.flavor == "artemis":
        # The limit reached, the broker moves the message: the queue empties, the DLQ gains it.
        poll(lambda: node_depth(broker, queue) == 0 and node_depth(broker, "DLQ") == dead_before + 1,
             30, f"{queue} moved to DLQ after {attempts} deliveries",
             explain=lambda: f"depths {broker.depths(queue)}, DLQ {broker.depths('DLQ')} "
                             f"(before: {dead_before} on node {NODE})")
        dead = take_dead_letter(broker, queue)
        assert [d.headers.get("loadgen_id") for d in dead] == ["0"], [d.headers for d in dead]
        assert dead[0].body == frames[0].body
    else:
        # Past Artemis's limit Classic still holds it on the queue and dead-letters nothing.
        assert node_depth(broker, queue) == 1, broker.depths(queue)
        assert node_depth(broker, "ActiveMQ.DLQ") == dead_before, broker.depths("ActiveMQ.DLQ")
        last = deliver(broker, queue, attempts, ack="auto")  # and consume it at last
        assert last.headers["loadgen_id"] == "0" and last.headers.get("redelivered") == "true"
        poll(lambda: node_depth(broker, queue) == 0, 30, f"{queue} empty after an auto-ack delivery",
             explain=lambda: f"depths {broker.depths(queue)}")


def run_query(spark: SparkSession, options: dict[str, str], sink: Any, checkpoint: Path,
              until_batch: int | None, acknowledged: Callable[[], bool] = lambda: True) -> str | None:
    """One run of the query from ``checkpoint``: the failure's text, or ``None`` once batch
    ``until_batch`` committed and ``acknowledged()`` holds (then the run is stopped); ``None``
    waits for a failure only.

    The reader acknowledges a committed batch when Spark next asks it for offsets, a trigger
    (500 ms) after the commit log has the batch: a run stopped as soon as the commit log has it
    leaves the batch queued, to be delivered again (measured: a two-worker run of the suite
    stopped before the ACK and found all 20 still queued 30 s later). ``acknowledged`` is what
    the caller waits for before stopping.
    """
    query = (spark.readStream.format("clustermq").options(**options).load().writeStream
             .foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="500 milliseconds").start())
    done = checkpoint / "commits" / str(until_batch)
    try:
        poll(lambda: not query.isActive or (until_batch is not None and done.exists() and acknowledged()),
             120, "the run to fail" + (f" or commit batch {until_batch} and be acknowledged"
                                       if until_batch is not None else ""),
             explain=lambda: f"committed: {done.exists()}, acknowledged: {acknowledged()}")
    finally:
        query.stop()
    try:
        query.awaitTermination(30)
    except StreamingQueryException as exc:
        return str(exc)
    return None


def test_a_batch_that_keeps_failing_costs_artemis_its_first_message_not_the_poison_every_ten_runs(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    """A sink that fails on one message fails every run at the batch that holds it; each run's
    connection closes in order (DISCONNECT) with that batch delivered and unacknowledged. Artemis
    counts that as a delivery of the batch's first message only (its STOMP cleanup rolls the
    session back treating the first delivery as delivered and gives the others their count
    back): after ten runs that message, not the poison one, is in ``DLQ``, and the query still
    fails on the poison. Classic keeps the whole batch queued
    however often the query fails, and a run that can write it commits every message. The query
    reads one node, so that the batch's messages are delivered there every time."""
    queue = f"test.poison.{uuid.uuid4().hex[:8]}"
    broker.produce(queue, BATCH_MESSAGES, nodes=[NODE])
    dead_before = node_depth(broker, dead_letters(broker))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def sink(batch: DataFrame, batch_id: int) -> None:
        ids = [int(r[0]) for r in batch.select(F.col("headers")["loadgen_id"]).collect()]
        if POISON_ID in ids:
            raise ValueError(f"poison message {POISON_ID} in batch {batch_id} ({len(ids)} rows)")
        if ids:
            batch.write.mode("append").parquet(str(out))

    def written() -> list[int]:
        if not out.exists():
            return []
        return sorted(int(r[0]) for r in spark.read.parquet(str(out)).select(F.col("headers")["loadgen_id"]).collect())

    options = broker.reader_options(queue, brokers=broker.cluster.brokers.split(",")[NODE],
                                    maxMessagesPerTrigger=100, replayTimeout=3000)
    runs = ARTEMIS_MAX_DELIVERY_ATTEMPTS if broker.flavor == "artemis" else CLASSIC_ATTEMPTS
    failed_batch: int | None = None
    log_from = broker.cluster.log_size(NODE)
    for run in range(runs):
        failure = run_query(spark, options, sink, checkpoint, None)
        found = re.search(rf"poison message {POISON_ID} in batch (\d+) \((\d+) rows\)", failure or "")
        assert found and int(found.group(1)) == (failed_batch if failed_batch is not None else int(found.group(1))), (
            f"run {run + 1} of {runs} did not fail on the poison message in batch {failed_batch}: "
            f"{(failure or '')[:800]!r}; depths {broker.depths(queue)}, dead letters "
            f"{broker.depths(dead_letters(broker))}")
        # A batch one message short is a head of the deliveries stranded by a failed connection's
        # racing cleanups (docs/broker-behaviour.md): the replay waited replayTimeout for it.
        assert int(found.group(2)) == BATCH_MESSAGES, (
            f"run {run + 1}'s batch held {found.group(2)} of the {BATCH_MESSAGES} messages; depths "
            f"{broker.depths(queue)}, dead letters {broker.depths(dead_letters(broker))}")
        failed_batch = int(found.group(1))
    assert failed_batch is not None
    if broker.flavor == "artemis":
        # Spark ends the source's worker with SIGTERM; the reader makes that a DISCONNECT. A
        # connection that ended without one shows in the node's log, and counts differently.
        failures = [line for line in broker.cluster.log_since(NODE, log_from).splitlines()
                    if "AMQ222067" in line]
        assert not failures, f"connections of the query's runs ended as failures: {failures}"
    before_dlq = written()
    print(f"\n[{broker.flavor}] {runs} runs failed at batch {failed_batch}; committed before it: "
          f"{len(before_dlq)} messages")

    if broker.flavor == "artemis":
        # Only the head of the batch counted ten deliveries: the first message the node delivered
        # and the query held, not the poison one; the rest of the batch stays queued.
        poll(lambda: node_depth(broker, "DLQ") == dead_before + 1
             and node_depth(broker, queue) == BATCH_MESSAGES - 1, 30,
             f"one message of the failing batch moved to DLQ after {runs} runs",
             explain=lambda: f"depths {broker.depths(queue)}, DLQ {broker.depths('DLQ')} "
                             f"(before: {dead_before})")
        dead = take_dead_letter(broker, queue)
        assert [d.headers.get("loadgen_id") for d in dead] == ["0"], [d.headers for d in dead]
        failure = run_query(spark, options, sink, checkpoint, failed_batch)
        assert failure is not None and f"poison message {POISON_ID} in batch {failed_batch}" in failure, (
            f"run {runs + 1} after the dead letter: {(failure or 'committed')[:800]}")
        assert written() == [] and node_depth(broker, queue) == BATCH_MESSAGES - 1, broker.depths(queue)
    else:
        assert node_depth(broker, queue) == BATCH_MESSAGES - len(before_dlq), broker.depths(queue)
        assert node_depth(broker, "ActiveMQ.DLQ") == dead_before, broker.depths("ActiveMQ.DLQ")

        # nothing lost: the next run, with the poison out of the sink's way, commits the batch
        def forgiving(batch: DataFrame, batch_id: int) -> None:
            batch.write.mode("append").parquet(str(out))

        assert run_query(spark, options, forgiving, checkpoint, failed_batch,
                         acknowledged=lambda: node_depth(broker, queue) == 0) is None, (
            f"the forgiving run failed; depths {broker.depths(queue)}")
        assert written() == list(range(BATCH_MESSAGES)), written()



def test_the_delivery_count_column_shows_what_each_broker_counts_of_a_failing_query_over_amqp(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    """``includeDeliveryCount`` over AMQP, a query that fails on a poison message every run.

    Every run subscribes to the one node that holds the messages and receives all of them (20,
    within its prefetch), plans them into its batch, fails, and closes its link in order,
    settling the 20 as failed deliveries (``modified``, ``delivery-failed``). Artemis counts
    each: the rows of run *r* (from 0) carry ``delivery_count`` *r* + 1. Classic 5.18 does not:
    a receiver that detaches in order gives back what it did not accept uncounted, and every row
    of every run carries 1 (it counts only when the connection failed, docs/broker-behaviour.md).
    Either way nothing leaves the queue in three runs: every message not committed is still on
    the node, none dead-lettered.
    """
    queue = f"test.counted.{uuid.uuid4().hex[:8]}"
    broker.produce(queue, BATCH_MESSAGES, nodes=[NODE])
    dead_before = node_depth(broker, dead_letters(broker))
    runs: list[list[tuple[int, int]]] = []  # per run: (loadgen id, delivery_count) of every row

    def sink(batch: DataFrame, batch_id: int) -> None:
        rows = [(int(r[0]), r[1]) for r in
                batch.select(F.col("headers")["loadgen_id"], "delivery_count").collect()]
        runs[-1].extend(rows)
        if any(i == POISON_ID for i, _ in rows):
            raise ValueError(f"poison message {POISON_ID} in batch {batch_id}")

    options = broker.reader_options(
        queue, brokers=broker.cluster.brokers.split(",")[NODE], transport="amqp",
        amqpBrokers=broker.cluster.amqp_brokers.split(",")[NODE], includeDeliveryCount="true",
        maxMessagesPerTrigger=100, replayTimeout=3000)
    for run in range(3):
        runs.append([])
        failure = run_query(spark, options, sink, tmp_path / "checkpoint", None)
        assert failure is not None and f"poison message {POISON_ID}" in failure, (
            f"run {run + 1} did not fail on the poison message: {(failure or 'committed')[:800]}")
    counts = [sorted({c for _, c in rows}) for rows in runs]
    print(f"\n[{broker.flavor}] delivery_count per run over AMQP: {counts}; rows per run "
          f"{[len(rows) for rows in runs]}")
    expected = [[run + 1] for run in range(3)] if broker.flavor == "artemis" else [[1]] * 3
    assert counts == expected, (counts, runs)
    committed = {i for rows in runs for i, _ in rows} - {i for i, _ in runs[-1]}
    assert node_depth(broker, queue) == BATCH_MESSAGES - len(committed), broker.depths(queue)
    assert node_depth(broker, dead_letters(broker)) == dead_before, broker.depths(dead_letters(broker))
