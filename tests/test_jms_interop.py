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
from typing import Any

import pytest
from pyspark.sql import SparkSession

from clustermq.groups import bucket_for_group
from test_reader import BRIDGE_COPIES, assert_each_delivery_emitted_once, drain, new_queue
from waits import cluster_state

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


def position(message_id: str, headers: dict[str, str]) -> int:
    """The message's place in its producer's sequence, 0-based.

    Classic's JMS message id ends in the producer's sequence number (from 1); Artemis's STOMP
    message-id is an internal number, but its CLI producer sets the property ``count``.
    """
    if "count" in headers:
        return int(headers["count"])
    assert message_id.startswith("ID:"), (message_id, headers)
    return int(message_id.rsplit(":", 1)[1]) - 1


def producer_of(message_id: str, headers: dict[str, str]) -> str:
    """Which producer sent the message (each test producer sends one group): Artemis's
    connection id property, else the JMS message id without its sequence number."""
    return headers.get("__AMQ_CID") or message_id.rsplit(":", 1)[0]


def produce_groups(broker, work: Path, queue: str, groups: dict[str, tuple[int, int, int]]) -> float:
    """Run one JMS producer per group at once: name -> (node, count, BytesMessage size or 0
    for TextMessages); the seconds it took."""
    started = time.monotonic()
    with ExitStack() as stack:
        procs = {g: stack.enter_context(jms_client(broker, work, g, node, "producer", queue, count,
                                                   group=g, body_size=size))
                 for g, (node, count, size) in groups.items()}
        for g, proc in procs.items():
            finish(proc, work / f"{g}.log", f"JMS producer {g}")
    return time.monotonic() - started


def check_groups(broker, rows, groups: dict[str, tuple[int, int, int]],
                 bridge_copies: int = 0) -> dict[str, set[str]]:
    """Every message read once with its exact body, each group in one partition per batch and
    in producer order at the sink (by batch, then sink position); ``group_id`` is the group's
    name where the broker shows it over STOMP (Artemis), else empty (Classic). Returns the
    nodes each group was read from.

    ``bridge_copies``: how many second copies a Classic bridge that died while forwarding may
    add (broker-behaviour.md "Copies made by a failed bridge": it re-sends what it had not seen
    acknowledged). Each must repeat the ``message_id`` and body of a message read before it; the
    checks of order and partitions hold for the first copies."""
    collected = rows.select("message_id", "headers", "body", "group_id", "batch_id", "partition",
                            "row", "node").orderBy("batch_id", "row").collect()
    firsts: dict[str, Any] = {}
    copies = 0
    for r in collected:
        first = firsts.setdefault(r["message_id"], r)
        if first is not r:
            copies += 1
            assert bytes(r["body"]) == bytes(first["body"]), (r["message_id"], r["node"], first["node"])
    assert len(firsts) == sum(count for _, count, _ in groups.values())
    assert copies <= bridge_copies, f"{copies} second copies, at most {bridge_copies} allowed"
    if copies:
        print(f"[{broker.flavor}] {copies} second copies from a failed bridge")
    collected = list(firsts.values())
    assert_each_delivery_emitted_once(rows)
    seen: dict[str, list[int]] = {}
    partitions: dict[tuple[str, int], set[int]] = {}
    nodes: dict[str, set[str]] = {}
    names: dict[str, set[str | None]] = {}
    sizes: dict[str, set[int]] = {}
    for r in collected:
        body = bytes(r["body"])
        pos = position(r["message_id"], r["headers"])
        producer = producer_of(r["message_id"], r["headers"])
        matched = TEXT.fullmatch(body)
        if matched:
            assert int(matched.group(1)) == pos, (body, r["message_id"])
        else:
            assert body == b"." * len(body), body[:40]
        sizes.setdefault(producer, set()).add(0 if matched else len(body))
        seen.setdefault(producer, []).append(pos)
        partitions.setdefault((producer, r["batch_id"]), set()).add(r["partition"])
        nodes.setdefault(producer, set()).add(r["node"])
        names.setdefault(producer, set()).add(r["group_id"])
    assert len(seen) == len(groups), f"{len(seen)} producers seen for {len(groups)} groups"
    for producer, positions in seen.items():
        assert positions == list(range(len(positions))), (
            f"{producer}: {len(positions)} rows, first out of order at "
            f"{next((i for i, p in enumerate(positions) if p != i), None)}")
    assert all(len(v) == 1 for v in sizes.values()), sizes
    assert sorted((len(seen[p]), sizes[p].pop()) for p in seen) == sorted(
        (count, size) for _, count, size in groups.values())
    split = {key: parts for key, parts in partitions.items() if len(parts) > 1}
    assert not split, f"groups split over partitions within a batch: {split}"
    shown = sorted(name for values in names.values() for name in values if name is not None)
    if broker.flavor == "artemis":
        assert all(len(values) == 1 for values in names.values()) and shown == sorted(groups), names
    else:
        assert not shown, names
    label = {p: next(iter(names[p])) or p[-12:] for p in seen}
    print(f"[{broker.flavor}] partitions per (producer, batch): "
          f"{sorted((label[p], b, sorted(v)) for (p, b), v in partitions.items())}")
    return {label[p]: nodes[p] for p in seen}


def test_jms_producer_groups_are_read_once_in_one_partition_in_order(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """Three JMS producers, one group each (gA and gC: TextMessages on node 0, gB:
    BytesMessages on node 1, persistent), read by a query with three partitions and several
    batches: :func:`check_groups`. Two groups on one node prove the slots keep them apart."""
    queue = new_queue("jms")
    groups = {"gA": (0, PER_GROUP, 0), "gB": (1, PER_GROUP, BYTES_SIZE), "gC": (0, 500, 0)}
    produced_s = produce_groups(broker, tmp_path, queue, groups)
    rows, progress = drain(spark, broker.reader_options(
        queue, numPartitions=3, maxMessagesPerTrigger=1500), tmp_path)
    print(f"\n[{broker.flavor}] 3 JMS producers in {produced_s:.1f} s, read in {len(progress)} batches")
    print(f"[{broker.flavor}] nodes per group: {check_groups(broker, rows, groups)}")
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


@pytest.mark.flavors("classic")
def test_jms_groups_forwarded_over_a_bridge_stay_together(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """Groups produced on a node the query does not read: the node's only consumers are the
    network bridges, which forward each group to one other node, where it is pinned to one
    slot again: :func:`check_groups` holds for what crossed the bridge. The query runs until
    every message arrived and was acknowledged: the listed nodes hold nothing when it starts
    (the bridges forward only once the reader subscribed there, after the queue's
    ``timeBeforeDispatchStarts``), so an AvailableNow run would rightly end at once. Every
    message here crosses a bridge, so a bridge that dies while forwarding may add second copies
    (at most its window, each with the first's ``message_id`` and body)."""
    queue = new_queue("jmsbridge")
    groups = {"gD": (2, 1000, 0), "gE": (2, 1000, BYTES_SIZE)}
    produce_groups(broker, tmp_path, queue, groups)
    nodes = broker.cluster.nodes()
    options = broker.reader_options(queue, numPartitions=3, maxMessagesPerTrigger=700)
    options["brokers"] = ",".join(f"{n.host}:{n.port}" for n in nodes[:2])
    total = sum(count for _, count, _ in groups.values())

    last: list[tuple[int, dict[str, int]]] = []  # distinct messages in the sink, depth per node

    def all_read_and_acknowledged(out: Path) -> bool:
        if not any(out.glob("*.parquet")):  # before the first batch's files are committed
            return False
        read = spark.read.parquet(str(out)).select("message_id").distinct().count()
        last[:] = [(read, broker.depths(queue))]
        read, depths = last[0]
        return read >= total and all(d == 0 for d in depths.values())

    try:
        rows, progress = drain(spark, options, tmp_path, timeout=180, until=all_read_and_acknowledged)
    except AssertionError as e:
        raise AssertionError(f"{e}; last seen (messages, depths) of {total}: {last}\n"
                             + cluster_state(broker, queue)) from None
    print(f"\n[{broker.flavor}] read over bridges in {len(progress)} batches; nodes per group: "
          f"{check_groups(broker, rows, groups, bridge_copies=BRIDGE_COPIES[broker.flavor])}")
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in nodes}


@pytest.mark.flavors("classic")
def test_a_group_pinned_to_a_bridge_that_may_not_carry_its_message_is_released_by_the_reader(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """The shape docs/broker-behaviour.md's "A group pinned to a bridge that may not carry its
    message" describes, built on purpose with a query reading nodes A and B:

    * A's only reader consumer is full (prefetch 1, holding ``m0`` while batch 0 runs), so A
      gives the first message of group ``pin0`` to its bridge consumer towards B, the one that
      stands for the reader's subscription there: the group is pinned to that bridge;
    * a message of ``pin0`` then reaches A with B in its broker path (sent here the way a bridge
      delivers it, by a JMS client of the Classic distribution,
      tests/drivers/BridgeSend.java): the loop check keeps the bridge from carrying it
      back to B, and A's reader consumer may not have it, the group being the bridge's.

    Nothing else arrives, so the query goes quiet with the message held on A. The reader's stall
    watch (read/stalls.py) re-opens its subscription on B, which removes A's bridge consumer and
    releases the group: every message is read exactly once and the queue ends empty. Without the
    watch the message stays on A for as long as the query runs."""
    from test_localcluster import classic_broker_ids, run_java_probe
    from waits import wait_for

    queue = new_queue("pinned")
    state = broker.cluster.state()
    node_a, node_b = state.nodes[0], state.nodes[1]
    a, b = (f"{n.host}:{n.stomp_port}" for n in (node_a, node_b))  # how depths name them
    broker.produce(queue, 1, nodes=[0])  # m0 (loadgen_id 0), for A's reader consumer
    options = broker.reader_options(queue, numPartitions=1, prefetchPerNode=1)
    options["brokers"] = f"{a},{b}"
    steps: list[str] = []

    def pin_while_batch_runs(batch, batch_id: int) -> None:
        if steps:
            return
        steps.append(f"batch {batch_id} holds {batch.count()} row(s) of A")
        # A's reader consumer is full with m0: the group's first message goes over the bridge to B.
        broker.produce(queue, 1, groups=1, prefix="pin", first_id=1, nodes=[0])
        wait_for(lambda: broker.depths(queue) == {a: 1, b: 1, **{
            f"{n.host}:{n.stomp_port}": 0 for n in state.nodes[2:]}}, 30, "pin0's first message forwarded to B",
                 explain=lambda: f"depths {broker.depths(queue)}")
        sent = run_java_probe(broker.cluster, "BridgeSend.java", str(node_a.peer_port), queue, "2",
                              '{"order":2}', "-", "pin0", classic_broker_ids(broker.cluster, node_b.index)[-1])
        steps.append(f"sent to A from B's path: {sent}")

    held: list[str] = []

    def all_read_and_acknowledged(out: Path) -> bool:
        if not any(out.glob("*.parquet")):
            return False
        read = spark.read.parquet(str(out)).count()
        depths = broker.depths(queue)
        held[:] = [f"{read} rows, depths {depths}"]
        return read >= 3 and all(d == 0 for d in depths.values())

    try:
        rows, _ = drain(spark, options, tmp_path, timeout=120, on_batch=pin_while_batch_runs,
                        until=all_read_and_acknowledged)
    except AssertionError as e:
        raise AssertionError(
            f"{e}; steps {steps}; last seen {held} (a message held on {a} in group pin0 "
            f"is one its bridge consumer towards {b} owns and may not carry)\n"
            + cluster_state(broker, queue)) from None
    read = sorted((int(r["id"]), r["node"], r["batch_id"]) for r in rows.select(
        rows["headers"]["loadgen_id"].alias("id"), "node", "batch_id").collect())
    print(f"\nread (loadgen_id, node, batch): {read}; {steps}")
    assert [r[0] for r in read] == [0, 1, 2], (read, steps)
    assert read[2][1] == a, (read, steps)  # the held message, from A
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
    for text in outputs.values():
        # The Classic client logs "Received <JMS id>" per message and its closing "Consumed: N"
        # line is not reliable (measured: all 500 receipts logged, exit 0, no such line); the
        # Artemis client logs only the closing line. Receipts where there are any, else it.
        received = re.findall(r"Received (ID:\S+)", text)
        consumed = re.search(r"Consumed: (\d+) messages", text)
        count = len(set(received)) if received else int(consumed.group(1)) if consumed else 0
        assert count == per_group and len(received) in (0, per_group), text[-2000:]
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


#: how a broker hands JMSReplyTo of the queue ``replies.q`` to an AMQP consumer
REPLY_TO = {"classic": "queue://replies.q", "artemis": "replies.q"}


def test_jms_consumers_read_the_writers_jms_header_columns(spark: SparkSession, broker, tmp_path: Path) -> None:
    """The columns ``ttl``, ``correlation_id``, ``reply_to`` and ``type`` become JMS headers, not
    properties: a JMS consumer selecting ``JMSCorrelationID`` and ``JMSType`` receives exactly
    the 10 rows that match, and an AMQP consumer (the reader, ``transport=amqp``) finds the other
    30 with the columns' values in its message properties (correlation-id, subject, reply-to,
    expiry), written through the atomic mode's staging and move."""
    queue = new_queue("jmsheaders")
    first = broker.cluster.nodes()[0]
    options = {**broker.reader_options(queue), "brokers": f"{first.host}:{first.port}"}
    rows = [(f"m{i}", 600_000 if i < 20 else None, f"c-{i % 2}", None if i % 5 == 0 else "replies.q",
             "invoice" if i % 4 < 2 else "refund") for i in range(40)]
    written_from = time.time() * 1000
    (spark.createDataFrame(rows, "body string, ttl long, correlation_id string, reply_to string, type string")
     .repartition(2).write.format("clustermq").mode("append").options(**options).save())
    written_to = time.time() * 1000
    selected = [i for i in range(40) if i % 4 == 0]  # c-0 and invoice
    with jms_client(broker, tmp_path, "consumer", 0, "consumer", queue, len(selected),
                    selector="JMSCorrelationID = 'c-0' AND JMSType = 'invoice'") as proc:
        finish(proc, tmp_path / "consumer.log", "JMS consumer selecting JMSCorrelationID and JMSType")
    amqp = {**options, "transport": "amqp", "amqpBrokers": broker.cluster.amqp_brokers.split(",")[0]}
    read, _ = drain(spark, amqp, tmp_path / "amqp")
    by_body = {bytes(r["body"]).decode(): r["headers"] for r in read.select("body", "headers").collect()}
    assert sorted(by_body) == sorted(f"m{i}" for i in range(40) if i not in selected), sorted(by_body)
    for i in range(40):
        headers = by_body.get(f"m{i}")
        if headers is None:
            continue
        _, ttl, correlation, reply_to, kind = rows[i]
        assert (headers.get("correlation-id"), headers.get("subject"), headers.get("reply-to")) == (
            correlation, kind, REPLY_TO[broker.flavor] if reply_to else None), (i, headers)
        expires = headers.get("expires")
        if ttl is None:
            assert expires is None, (i, headers)
        else:
            assert expires is not None and written_from + ttl <= int(expires) <= written_to + ttl, (i, headers, written_from, written_to)
    assert broker.wait_depth_zero(queue)[first.name] == 0
