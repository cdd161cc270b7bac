"""The streaming reader against a live 3-node cluster (each flavor) and a real local Spark."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from tcpproxy import TcpProxy
from waits import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

#: What a failed Classic network bridge can send a second time: the messages it had in flight,
#: at most its prefetch (a networkConnector's ``prefetchSize``, 1000 by default, which
#: the local cluster's templates/classic/network-connector.xml.tmpl leaves). Artemis's cluster
#: bridges re-send with duplicate detection (``use-duplicate-detection`` in
#: templates/artemis/cluster-connection.xml.tmpl, both under clustermq/devtools/localcluster/),
#: and nothing else in the competing-consumer test gives a delivered message back: no copy there.
BRIDGE_COPIES = {"classic": 1000, "artemis": 0}


def new_queue(tag: str) -> str:
    return f"test.{tag}.{uuid.uuid4().hex[:8]}"


def drain(
    spark: SparkSession, options: dict[str, str], work: Path, timeout: float = 300.0,
    on_batch: Callable[[DataFrame, int], object] | None = None,
    until: Callable[[Path], bool] | None = None,
) -> tuple[DataFrame, list[dict]]:
    """Trigger.AvailableNow into Parquet; every row tagged with its batch, its Spark partition
    and ``row``, its position in the sink (``monotonically_increasing_id``: the partition in the
    high bits, the row's place in what the partition's task emitted below them), so that order
    is checked as the sink received it, not by a number the connector assigned.
    ``on_batch(batch, batch_id)`` runs after each batch is written, before it commits.
    ``until(out)``: run a ``processingTime`` query instead, stopped once it holds (for messages
    that reach the listed nodes only while the query runs, which AvailableNow does not wait for)."""
    out = work / "out"
    df = spark.readStream.format("clustermq").options(**options).load()
    df = df.withColumn("partition", F.spark_partition_id())

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        (batch.withColumn("batch_id", F.lit(batch_id))
         .withColumn("row", F.monotonically_increasing_id())
         .write.mode("append").parquet(str(out)))
        if on_batch is not None:
            on_batch(batch, batch_id)

    writer = df.writeStream.foreachBatch(write_batch).option("checkpointLocation", str(work / "checkpoint"))
    if until is None:
        query = writer.trigger(availableNow=True).start()
        if not query.awaitTermination(timeout):
            query.stop()
            raise AssertionError(f"AvailableNow query did not finish in {timeout:.0f} s")
    else:
        query = writer.trigger(processingTime="200 milliseconds").start()
        deadline = time.monotonic() + timeout
        try:
            while not until(out) and query.isActive and time.monotonic() < deadline:
                time.sleep(0.5)
            assert until(out), f"query did not reach its end condition in {timeout:.0f} s"
        finally:
            query.stop()
    assert query.exception() is None, query.exception()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    if options.get("password"):
        assert options["password"] not in " ".join(p.json for p in query.recentProgress)
        assert options["password"] not in str(query.status)
    rows = spark.read.parquet(str(out)) if out.exists() else spark.createDataFrame([], "x int")
    return rows, progress


def loadgen_ids(rows: DataFrame) -> list[int]:
    return [int(r[0]) for r in rows.select(F.col("headers")["loadgen_id"]).collect()]


def assert_each_delivery_emitted_once(rows: DataFrame) -> dict[str, int]:
    """Every delivery the run received became exactly one row: per node, the rows' offsets are
    0, 1, ..., n-1 (a fresh checkpoint starts every node at 0, and a batch is a contiguous range
    of each node's delivery counter). A row emitted twice repeats an offset; a delivery lost
    between planning and the sink leaves a gap. Returns the rows per node."""
    per_node: dict[str, list[int]] = {}
    for r in rows.select("node", "sequence").collect():
        per_node.setdefault(r["node"], []).append(r["sequence"])
    for node, offsets in per_node.items():
        offsets.sort()
        twice = sorted({o for a, o in zip(offsets, offsets[1:]) if a == o})
        gaps = sorted(set(range(len(offsets))) - set(offsets))
        assert not twice and not gaps, (
            f"node {node}: {len(offsets)} rows, offsets emitted twice {twice[:10]}, "
            f"missing {gaps[:10]}")
    return {node: len(offsets) for node, offsets in per_node.items()}


def total_depth_reaching(broker, queue: str, expected: int, timeout: float = 15.0) -> int:
    """The queue's depth over all nodes once it equals ``expected`` (ACK frames are
    asynchronous), or the last value read when it does not within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        depth = sum(d or 0 for d in broker.depths(queue).values())
        if depth == expected or time.monotonic() > deadline:
            return depth
        time.sleep(0.2)


@contextmanager
def python_stderr_to(spark: SparkSession, path: Path) -> Iterator[Path]:
    """What the Python processes Spark starts meanwhile write to stderr, copied into ``path``.

    The reader lives in a Python process the JVM starts for each query (the streaming source
    runner); the JVM copies that process's output to its ``System.err`` as it was when the
    process started, the suite's terminal. Pointing ``System.err`` at a file while a query
    starts gives the test the reader's own log; the file is closed (and ``System.err`` given
    back) on exit, so the query must be stopped inside the block.
    """
    system = spark._jvm.java.lang.System  # type: ignore[union-attr]
    previous = system.err
    stream = spark._jvm.java.io.PrintStream(  # type: ignore[union-attr]
        spark._jvm.java.io.FileOutputStream(str(path), True), True)  # type: ignore[union-attr]
    system.setErr(stream)
    try:
        yield path
    finally:
        system.setErr(previous)
        stream.close()


def start_collecting(
    spark: SparkSession, options: dict[str, str], work: Path, collected: list[Row]
) -> StreamingQuery:
    """A ``processingTime`` query that appends ``(id, node, sequence)`` of every row to
    ``collected`` (in the test's process: foreachBatch runs there), for tests that poll."""

    def collect(batch: DataFrame, batch_id: int) -> None:
        collected.extend(batch.select(F.col("headers")["loadgen_id"].cast("int").alias("id"),
                                      "node", "sequence").collect())

    return (spark.readStream.format("clustermq").options(**options).load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(work / "checkpoint"))
            .trigger(processingTime="200 milliseconds").start())


def test_available_now_drains_grouped_backlog(spark: SparkSession, broker, tmp_path: Path) -> None:
    """The issue's acceptance run: 20,000 messages, 100 groups, maxMessagesPerTrigger=3000."""
    queue = new_queue("drain")
    produced = broker.produce(queue, 20_000, groups=100)
    assert sum(produced.values()) == 20_000
    rows, progress = drain(spark, broker.reader_options(queue, maxMessagesPerTrigger=3000), tmp_path)

    assert rows.count() == 20_000
    assert rows.select("message_id").distinct().count() == 20_000
    assert sorted(loadgen_ids(rows)) == list(range(20_000))
    assert sum(assert_each_delivery_emitted_once(rows).values()) == 20_000
    # admission control: no batch above the limit, and at least 7 batches for 20,000
    sizes = [p["numInputRows"] for p in progress]
    assert max(sizes) <= 3000 and sum(sizes) == 20_000 and len(sizes) >= 7
    # every group id in exactly one partition index per batch
    split = (
        rows.groupBy("batch_id", "group_id").agg(F.countDistinct("partition").alias("n"))
        .where("n > 1").count()
    )
    assert split == 0
    # each group came from one node, and reached the sink in producer order: by batch, then
    # by the row's position in its partition's output (one partition per group and batch)
    for r in rows.groupBy("group_id").agg(F.countDistinct("node").alias("n")).collect():
        assert r["n"] == 1
    ordered = rows.select(
        "group_id", "batch_id", "row", F.col("headers")["loadgen_group_seq"].cast("int").alias("pos")
    ).orderBy("batch_id", "row").collect()
    last: dict[str, int] = {}
    for r in ordered:
        assert r["pos"] > last.get(r["group_id"], -1), (
            f"group {r['group_id']}: producer position {r['pos']} reached the sink after "
            f"{last[r['group_id']]} (batch {r['batch_id']})")
        last[r["group_id"]] = r["pos"]
    assert len(last) == 100 and all(pos == 199 for pos in last.values()), last
    # schema as documented; columns filled
    first = rows.where("group_id is not null").first()
    assert first["destination"] == broker.destination(queue)
    assert first["timestamp"] is not None and first["priority"] is not None
    assert first["redelivered"] is False
    assert json.loads(first["body"])["order"] == int(first["headers"]["loadgen_id"])
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_available_now_recounts_the_queue_before_it_ends(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """Messages the depth measured at start missed are read before the run ends.

    The start measurement can miss messages: Artemis counts a message it is moving between
    nodes on neither node. Here the missed messages are produced during the first batch, after
    the measurement; the recount once the measured backlog is read finds them, and the run ends
    with every node empty.
    """
    queue = new_queue("recount")
    broker.produce(queue, 900)

    def produce_more(batch: DataFrame, batch_id: int) -> None:
        if batch_id == 0:
            broker.produce(queue, 150, first_id=900)

    rows, progress = drain(
        spark, broker.reader_options(queue, maxMessagesPerTrigger=300), tmp_path,
        on_batch=produce_more,
    )
    assert sorted(loadgen_ids(rows)) == list(range(1050))
    assert sum(p["numInputRows"] for p in progress) == 1050
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_available_now_ends_soon_when_competing_consumers_emptied_the_queue(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """A backlog that other consumers took is not waited for: the run ends once two depth
    probes find the queue empty, long before ``availableNowIdleTimeout`` (120 s here).

    Every message is read by the reader or by the competitor. The reader emits each delivery
    once (its offsets per node are 0..n-1, no repeat). A message may be read twice only as a
    broker's copy: a second delivery with the same ``message_id``, which on Classic a network
    bridge that fails while forwarding makes of what it had not seen acknowledged
    (docs/broker-behaviour.md, "Copies made by a failed bridge"; seen in the full suite, where
    earlier fault tests leave bridges to be rebuilt). So no message is delivered more than
    twice, and there are at most as many copies as a bridge holds in flight
    (``BRIDGE_COPIES``): none on Artemis.
    """
    from clustermq.devtools.bench.raw import Taken, raw_drain

    queue = new_queue("competing")
    total = 3000
    broker.produce(queue, total)
    taken: list[Taken] = []

    def competitor(batch: DataFrame, batch_id: int) -> None:
        # takes what the reader has not prefetched (200 per node)
        if batch_id == 0:
            taken.extend(raw_drain(broker.connection(queue), total, idle_timeout_s=3.0,
                                   key_header="loadgen_id").taken)

    rows, _ = drain(spark, broker.reader_options(queue, maxMessagesPerTrigger=100,
                                                 availableNowIdleTimeout=120_000),
                    tmp_path, timeout=60, on_batch=competitor)
    assert_each_delivery_emitted_once(rows)
    ours = [(int(r["headers"]["loadgen_id"]), r["message_id"], r["redelivered"], "reader")
            for r in rows.select("headers", "message_id", "redelivered").collect()]
    theirs = [(int(t.key or -1), t.message_id, t.redelivered, "competitor") for t in taken]
    assert theirs, "the competing consumer took nothing"
    deliveries: dict[int, list[tuple]] = {}
    for delivery in ours + theirs:
        deliveries.setdefault(delivery[0], []).append(delivery)
    missing = sorted(set(range(total)) - set(deliveries))
    assert not missing and len(deliveries) == total, (len(missing), missing[:20])
    copies = {i: d for i, d in deliveries.items() if len(d) > 1}
    print(f"[{broker.flavor}] reader {len(ours)}, competitor {len(theirs)}, "
          f"read twice {len(copies)}: {dict(list(copies.items())[:10])}")
    assert all(len({m for _, m, _, _ in d}) == 1 for d in copies.values()), copies
    assert all(len(d) == 2 for d in copies.values()), copies
    assert len(copies) <= BRIDGE_COPIES[broker.flavor], copies
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_admission_control_by_messages_and_bytes(spark: SparkSession, broker, tmp_path: Path) -> None:
    queue = new_queue("limits")
    broker.produce(queue, 1200, size=1000)
    rows, progress = drain(spark, broker.reader_options(queue, maxMessagesPerTrigger=250), tmp_path / "a")
    sizes = [p["numInputRows"] for p in progress]
    assert sum(sizes) == 1200 and max(sizes) <= 250 and len(sizes) >= 5

    broker.produce(queue, 600, size=1000)
    rows, progress = drain(
        spark, broker.reader_options(queue, maxBytesPerTrigger=100_000), tmp_path / "b"
    )
    sizes = [p["numInputRows"] for p in progress]
    assert sum(sizes) == 600 and max(sizes) <= 100  # 1000-byte bodies, 100 kB per batch
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_the_first_batch_of_a_cold_backlog_takes_what_the_nodes_deliver_at_once(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """The first batch is not planned at the first delivery: it fills while deliveries keep
    coming (docs/design.md, "The batch after an empty buffer"). Answered at the first delivery,
    it held 1-430 of a 60,000-message Classic backlog (the nodes wait
    ``timeBeforeDispatchStarts`` before they dispatch) and a whole sink run was spent on it.
    6,000 messages over the nodes, batches of at most 4,000: the first is full."""
    queue = new_queue("fill")
    broker.produce(queue, 6000)
    rows, progress = drain(spark, broker.reader_options(queue, maxMessagesPerTrigger=4000), tmp_path)
    sizes = [p["numInputRows"] for p in progress]
    assert sizes[0] == 4000 and sum(sizes) == 6000, sizes
    assert sorted(loadgen_ids(rows)) == list(range(6000))
    assert_each_delivery_emitted_once(rows)
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_a_processing_time_query_s_first_batch_holds_the_backlog(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """A fresh ``processingTime`` query over a backlog reads it from batch 0 on: the first
    ``latestOffset`` waits as long as a node may take to start delivering (the dialect's
    ``first_delivery_wait_s``; a Classic node holds dispatch back ``timeBeforeDispatchStarts``
    after a queue gets its first consumer). Answered after 0.2 s, batch 0 came out empty on
    Classic, and queue_to_delta spent a whole cold sink run on it (docs/design.md, "The batch
    after an empty buffer")."""
    queue = new_queue("first")
    broker.produce(queue, 3000)
    seen: list[int] = []

    def all_read(out: Path) -> bool:
        if not any(out.glob("*.parquet")):  # before the first batch's files are committed
            return False
        seen[:] = [spark.read.parquet(str(out)).count()]
        return seen[0] >= 3000

    rows, _ = drain(spark, broker.reader_options(queue, maxMessagesPerTrigger=1000), tmp_path,
                    timeout=120, until=all_read)
    per_batch = {r["batch_id"]: r["count"] for r in rows.groupBy("batch_id").count().collect()}
    assert per_batch.get(0, 0) > 0, f"batch 0 read nothing; rows per batch: {per_batch}"
    assert sorted(loadgen_ids(rows)) == list(range(3000)), per_batch
    assert_each_delivery_emitted_once(rows)


def test_progress_reports_the_lag_per_node(spark: SparkSession, broker, tmp_path: Path) -> None:
    """``latestOffset`` in every progress record: per node the next offset, what is buffered,
    what is acknowledged (exactly the batch's start: everything below it was committed), and
    the queue's backlog on the broker once measured."""
    queue = new_queue("lag")
    broker.produce(queue, 3000)

    def slow_sink(batch: DataFrame, batch_id: int) -> None:
        batch.count()
        time.sleep(1.0)

    query = (spark.readStream.format("clustermq")
             .options(**broker.reader_options(queue, maxMessagesPerTrigger=300)).load()
             .writeStream.foreachBatch(slow_sink)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    records: dict[int, dict] = {}
    while query.isActive:
        for p in query.recentProgress:
            records[p["batchId"]] = p
        query.awaitTermination(0.5)
    for p in query.recentProgress:
        records[p["batchId"]] = p
    assert query.exception() is None, query.exception()
    names = [n.name for n in broker.cluster.nodes()]
    with_rows = [p for _, p in sorted(records.items()) if p["numInputRows"] > 0]
    assert sum(p["numInputRows"] for p in with_rows) == 3000
    measured = []
    for p in with_rows:
        source = p["sources"][0]
        latest = json.loads(source["latestOffset"])
        start = (json.loads(source["startOffset"]) if source["startOffset"] else None) or {}
        assert sorted(latest) == sorted(names), latest
        for node, lag in latest.items():
            assert lag["acknowledged"] == int(start.get(node, 0)), (p["batchId"], node, lag, start)
            assert lag["buffered"] >= lag["offset"] - lag["acknowledged"] >= 0, lag
        if all("backlog" in lag for lag in latest.values()):
            measured.append(sum(lag["backlog"] for lag in latest.values()))
    assert measured, "no progress record carried the backlog"
    # The broker's own count: a Classic network can count a message on two nodes while a bridge
    # moves it (3,013 for 3,000 seen once), so it is not bounded by what was produced.
    assert measured[0] > 0
    assert measured[-1] <= measured[0], measured  # measured while the queue drains
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_a_node_delivers_a_full_batch_between_two_acknowledgements(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """After an ACK a node delivers the room it freed before the next ACK, not a page or two
    (Classic's slow mode with the default ``maxPageSize`` of 200, docs/broker-behaviour.md,
    "The queue's page size").

    Each node may hold ``prefetchPerNode`` = W = 2,000 unacknowledged messages (on Artemis the
    byte window sized from it; 1,000-byte bodies make that about as many messages), the backlog
    is twice that per node, batches have no limit and each sleeps 1 s. The reader acknowledges
    batch b-1 when it plans batch b, so a row of batch b was delivered before the node had seen
    more than b ACKs, and before the first ACK a node delivers at most its window. A node that
    delivers only two 200-message pages per ACK therefore gives batches 0..b at most
    W + 400 b rows, for every b.

    A node that refills its window gives batches 0..b about W + (batches 0..b-2): the room the
    ACK sent when batch b-1 was planned frees arrives while batch b-1 runs, so in batch b.
    Batch 0 may be planned before the first window has arrived (it is then small, and batch 1
    brings the rest), so batches 0..3 hold 2 W = 4,000 > W + 1,200 whatever batch 0 took: a
    node with 2 W to deliver (one at least: 12,000 over 3 nodes) exceeds the slow bound by
    batch 3. With W = 1,000 only batch 2 could show it, and only when batch 0 took > 800.
    (Per node, not per batch: a Classic network moves a node's backlog to the others' stores,
    so the nodes' shares differ from run to run.)
    """
    queue = new_queue("pages")
    prefetch, nodes = 2000, len(broker.cluster.nodes())
    total = 2 * prefetch * nodes
    broker.produce(queue, total, size=1000)

    def slow(batch: DataFrame, batch_id: int) -> None:
        time.sleep(1.0)  # the slow sink is the condition under test, not a synchronisation

    rows, _ = drain(spark, broker.reader_options(queue, prefetchPerNode=prefetch), tmp_path,
                    on_batch=slow)
    assert sorted(loadgen_ids(rows)) == list(range(total))
    assert_each_delivery_emitted_once(rows)
    shares: dict[str, dict[int, int]] = {}  # node: batch id: rows
    for r in rows.groupBy("batch_id", "node").count().collect():
        shares.setdefault(r["node"], {})[r["batch_id"]] = r["count"]
    batches = max(b for per_batch in shares.values() for b in per_batch) + 1
    pages = 2 * 200
    bound = [prefetch + pages * b for b in range(batches)]
    cumulative = {node: list(itertools.accumulate(per_batch.get(b, 0) for b in range(batches)))
                  for node, per_batch in sorted(shares.items())}
    print(f"[{broker.flavor}] rows of batches 0..b per node: {cumulative}; slow bound {bound}")
    faster = {node: b for node, rows_to in cumulative.items()
              for b in range(batches) if rows_to[b] > bound[b]}
    assert faster, (f"rows of batches 0..b per node {cumulative} never exceeded the slow mode's "
                    f"bound W + {pages} b = {bound}: no node refilled its window after an ACK")
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_client_individual_acknowledges_exactly_the_committed_messages(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """``ackMode=client-individual``: one ACK per message, each after its batch committed.

    While batch k runs, batches 0..k-1 are committed and acknowledged (when batch k was
    planned), batch k and what is prefetched are not: the queue's depth over the nodes (which
    counts delivered, unacknowledged messages) must then be the total minus the rows of
    batches 0..k-1, exactly. A cumulative ACK sent in this mode acknowledges one message and
    leaves the depth too high; an ACK before the commit makes it too low.
    """
    queue = new_queue("individual")
    total = 1200
    broker.produce(queue, total)
    sizes: list[int] = []
    depths: list[tuple[int, int, int]] = []  # (batch id, expected depth, depth found)

    def check_depth(batch: DataFrame, batch_id: int) -> None:
        expected = total - sum(sizes)
        sizes.append(batch.count())
        depths.append((batch_id, expected, total_depth_reaching(broker, queue, expected)))
        # fail the query at once (its error names this) rather than leave it waiting for
        # messages a wrong ACK left queued
        assert depths[-1][2] == expected, f"depth while batch {batch_id} ran: {depths}"

    rows, progress = drain(
        spark, broker.reader_options(queue, maxMessagesPerTrigger=300, ackMode="client-individual"),
        tmp_path, timeout=120, on_batch=check_depth)
    print(f"[{broker.flavor}] batches {sizes}, depth while each ran {depths}")
    assert sorted(loadgen_ids(rows)) == list(range(total))
    assert_each_delivery_emitted_once(rows)
    assert sum(sizes) == total and len(sizes) >= 4 and max(sizes) <= 300, sizes
    assert all(expected == found for _, expected, found in depths), depths
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def interval_clear_of_now(margin_s: float) -> int:
    """A ``processingTime`` interval in ms, at least ``2 * margin_s``, whose next multiple since
    the epoch (where Spark fires the next trigger) is at least ``margin_s`` from now."""
    now_ms, margin_ms = int(time.time() * 1000), int(margin_s * 1000)
    interval_ms = 2 * margin_ms
    while interval_ms - now_ms % interval_ms < margin_ms:
        interval_ms += 997  # a prime step moves the boundary by a different amount each time
    return interval_ms


def test_a_query_stopped_before_its_next_trigger_gives_its_last_batch_back_to_the_next_run(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """Spark tells a source that a batch committed only when it plans the next one
    (``latestOffset``, docs/design.md, "Acknowledgement on commit"). A ``processingTime`` query
    stopped while it waits for its next trigger has therefore not acknowledged its last
    committed batch: the brokers take it back when the query's connections close, and the next
    run on the same checkpoint reads it again (at least once; nothing is lost). The batch's
    rows reach the sink twice, exactly those, and on Classic flagged ``redelivered``.

    Spark fires a ``processingTime`` trigger at the multiples of its interval since the epoch,
    not one interval after the last (``ProcessingTimeExecutor``): a 20-second trigger came 10.4 s
    after a query's first batch. The interval is therefore chosen so that its next boundary is
    at least ``margin_s`` away, which leaves the stop inside the wait for the next trigger, so a
    depth below the total after the stop means the reader acknowledged without Spark's word.
    (A run's first batch may have no rows: its offsets can name the nodes before any delivery.)
    """
    queue = new_queue("stopped")
    total = 300
    broker.produce(queue, total)
    collected: list[Row] = []
    with_rows: list[int] = []  # ids of the batches that had rows

    def collect(batch: DataFrame, batch_id: int) -> None:
        rows = batch.select(F.col("headers")["loadgen_id"].cast("int").alias("id"),
                            "redelivered").collect()
        collected.extend(rows)
        if rows:
            with_rows.append(batch_id)

    def committed_with_rows() -> bool:
        return bool(with_rows) and (checkpoint / "commits" / str(with_rows[0])).exists()

    checkpoint = tmp_path / "checkpoint"
    margin_s = 240  # the wait below (120 s) and the stop, with room to spare
    interval_ms = interval_clear_of_now(margin_s)
    started = time.time()
    query = (spark.readStream.format("clustermq").options(**broker.reader_options(queue)).load()
             .writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime=f"{interval_ms} milliseconds").start())
    try:
        wait_for(lambda: committed_with_rows() or not query.isActive, 120,
                 "the first batch with rows committed",
                 explain=lambda: f"active {query.isActive}, batches with rows {with_rows}, "
                                 f"{len(collected)} rows, last progress {query.lastProgress}")
        assert query.isActive, query.exception()
    finally:
        query.stop()
    stopped_after_s = time.time() - started
    assert stopped_after_s < margin_s, (
        f"the stop came {stopped_after_s:.0f} s after the start, past the next trigger")
    assert len(with_rows) == 1, f"batches with rows {with_rows}: a trigger came before the stop"
    first_run = sorted(r["id"] for r in collected)
    assert first_run and not any(r["redelivered"] for r in collected), collected[:10]
    depths = broker.settled_depths(queue)
    assert sum(d or 0 for d in depths.values()) == total, (
        f"after the stop {depths} of {total} queued: the reader acknowledged some of the "
        f"{len(first_run)} rows of its committed batch before Spark planned another")

    collected.clear()
    second = (spark.readStream.format("clustermq").options(**broker.reader_options(queue)).load()
              .writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
              .trigger(availableNow=True).start())
    assert second.awaitTermination(120), "the second run did not end in 120 s"
    assert second.exception() is None, second.exception()
    second_run = sorted(r["id"] for r in collected)
    assert second_run == list(range(total)), (len(second_run), len(set(second_run)))
    flagged = sorted(r["id"] for r in collected if r["redelivered"])
    print(f"[{broker.flavor}] first run: {len(first_run)} rows committed, not acknowledged; "
          f"second run: {len(second_run)} rows, {len(flagged)} flagged redelivered")
    if broker.flavor == "classic":  # Artemis's STOMP flag is unreliable (README)
        assert set(first_run) <= set(flagged), sorted(set(first_run) - set(flagged))[:10]
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_group_to_partition_is_stable_across_runs(spark: SparkSession, broker, tmp_path: Path) -> None:
    """Each group in exactly one partition in a run, the same one in the next run: counted as
    distinct (group, partition) pairs, so a group split over two partitions shows."""
    queue = new_queue("stable")
    placements: list[set[tuple[str, int]]] = []
    for run in range(2):
        broker.produce(queue, 900, groups=30, prefix="cust-")
        rows, _ = drain(spark, broker.reader_options(queue, numPartitions=4), tmp_path / f"run{run}")
        assert rows.count() == 900
        pairs = {(r["group_id"], r["partition"])
                 for r in rows.select("group_id", "partition").distinct().collect()}
        assert len({g for g, _ in pairs}) == 30 and len(pairs) == 30, sorted(pairs)
        placements.append(pairs)
    assert placements[0] == placements[1]
    assert len({p for _, p in placements[0]}) > 1  # groups do spread


def test_unreachable_node_is_reported_others_keep_working_and_it_is_back_within_the_back_off(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """A node refusing connections from the start (node 1 behind a TCP proxy that closes every
    connection) is reported in the reader's log (a WARNING naming it and the cause, then one per
    failed attempt with the back-off, and one when it is back) and in the progress (its lag
    has no backlog, nothing read, and says it is disconnected); the other nodes are read meanwhile. Once the node accepts
    again, the reader's next attempt comes within ``maxReconnectDelay`` (plus a second's slack
    for a loaded machine), and it reads from the node again.
    """
    queue = new_queue("deadnode")
    nodes = broker.cluster.nodes()
    max_delay_s = 0.5
    collected: list[Row] = []
    retry = f"still unreachable, next attempt in <= {max_delay_s:.1f} s"
    with TcpProxy(nodes[1].host, nodes[1].port) as proxy:
        proxy.drop()
        options = broker.reader_options(queue, initialReconnectDelay=100,
                                        maxReconnectDelay=int(max_delay_s * 1000))
        options["brokers"] = ",".join([nodes[0].name, proxy.address, nodes[2].name])
        broker.produce(queue, 300, nodes=[0, 2])
        with python_stderr_to(spark, tmp_path / "reader.log") as log:
            query = start_collecting(spark, options, tmp_path, collected)
            try:
                wait_for(lambda: len({r["id"] for r in collected}) >= 300, 120,
                         "the 300 messages of the reachable nodes")
                assert {r["node"] for r in collected} <= {nodes[0].name, nodes[2].name}

                def lag() -> list[dict]:
                    return [json.loads(p["sources"][0]["latestOffset"])
                            for p in query.recentProgress if p["sources"][0]["latestOffset"]]

                # a batch's progress record comes after its sink has the rows
                wait_for(lambda: any(record[nodes[0].name]["offset"] + record[nodes[2].name]["offset"]
                                     >= 300 for record in lag()), 60, "the progress of the last batch")
                assert all(record[proxy.address] == {"offset": 0, "buffered": 0, "acknowledged": 0,
                                                     "disconnected": 1} for record in lag()), lag()
                # Six failed retries take 2.2 s with the cap (0.1 + 0.2 + 0.4 + 3 x 0.5), and
                # the next delay would be 6.4 s without it, which the bound below would catch.
                wait_for(lambda: log.read_text(errors="replace").count(retry) >= 6, 30,
                         "six failed reconnect attempts in the reader's log")
                refused = proxy.refused
                proxy.resume()
                resumed = time.monotonic()
                wait_for(lambda: proxy.accepted > 0, 30, "a connection to the node that is back",
                         interval=0.02)
                back_after = time.monotonic() - resumed
                broker.produce(queue, 300, first_id=300, nodes=[1])
                wait_for(lambda: {r["id"] for r in collected} >= set(range(600)), 120,
                         "every message, also those produced to the node that came back")
                wait_for(lambda: all(d == 0 for d in broker.depths(queue).values()), 60,
                         "an empty queue")
                assert query.exception() is None, query.exception()
            finally:
                query.stop()
        text = log.read_text(errors="replace")
    print(f"[{broker.flavor}] {refused} refused attempts while down; a connection {back_after:.2f} s "
          f"after the node was back; {sum(r['node'] == proxy.address for r in collected)} rows from it")
    assert {r["id"] for r in collected} == set(range(600))
    assert len({(r["node"], r["sequence"]) for r in collected}) == len(collected)  # emitted once
    assert any(r["node"] == proxy.address for r in collected), "nothing read from the node once back"
    assert f"broker node {proxy.address}: " in text and "reconnecting in the background" in text, text
    assert text.count(f"node {proxy.address} {retry}") >= 6 and refused >= 6, (refused, text[-2000:])
    assert f"reconnected to node {proxy.address}" in text, text[-2000:]
    assert not any(f"node {n.name} still unreachable" in text for n in (nodes[0], nodes[2]))
    assert back_after <= max_delay_s + 1.0, f"reconnected {back_after:.2f} s after the node was back"


def test_a_running_query_fails_once_no_node_was_reachable_for_no_node_timeout(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """Every node behind a TCP proxy; once the query has read, all proxies close their
    connections and refuse new ones. The query fails with ``NoNodeReachable`` naming the option
    and every node, not before ``noNodeTimeout`` (2 s here) and within a few seconds after it
    (the check runs on every trigger, 200 ms apart plus the 0.2 s an empty trigger waits)."""
    queue = new_queue("nonode")
    timeout_s = 2.0
    proxies = [TcpProxy(n.host, n.port) for n in broker.cluster.nodes()]
    collected: list[Row] = []
    try:
        options = broker.reader_options(queue, noNodeTimeout=int(timeout_s * 1000),
                                        initialReconnectDelay=100, maxReconnectDelay=500)
        options["brokers"] = ",".join(p.address for p in proxies)
        broker.produce(queue, 300)
        query = start_collecting(spark, options, tmp_path, collected)
        try:
            wait_for(lambda: len(collected) >= 300, 120, "the 300 messages")
            wait_for(lambda: all(d == 0 for d in broker.depths(queue).values()), 60, "an empty queue")
            for proxy in proxies:
                proxy.drop()
            cut = time.monotonic()
            with pytest.raises(StreamingQueryException) as err:
                query.awaitTermination(60)
            failed_after = time.monotonic() - cut
        finally:
            query.stop()
    finally:
        for proxy in proxies:
            proxy.close()
    text = str(err.value)
    print(f"[{broker.flavor}] failed {failed_after:.2f} s after the last node went away")
    assert "no broker node reachable for 2 s (option noNodeTimeout)" in text, text[:2000]
    assert all(p.address in text for p in proxies), text[:2000]
    assert options["password"] not in text
    assert sorted(r["id"] for r in collected) == list(range(300))
    assert timeout_s <= failed_after <= timeout_s + 3.0, failed_after


def test_no_reachable_node_fails_with_a_clear_error(spark: SparkSession, free_port: int, tmp_path: Path) -> None:
    df = (
        spark.readStream.format("clustermq")
        .option("brokers", f"127.0.0.1:{free_port}").option("queue", "q")
        .option("username", "u").option("password", "hunter2-secret").load()
    )
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start()
    with pytest.raises(Exception) as err:
        query.awaitTermination(60)
    text = str(err.value)
    assert "no broker node is reachable" in text and f"127.0.0.1:{free_port}" in text
    assert "hunter2-secret" not in text


def test_wrong_password_is_a_clear_error_without_the_password(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    options = broker.reader_options("q.auth")
    options["password"] = "definitely-wrong-pw"
    query = (
        spark.readStream.format("clustermq").options(**options).load()
        .writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start()
    )
    with pytest.raises(Exception) as err:
        query.awaitTermination(60)
    text = str(err.value)
    assert "login failed" in text and "definitely-wrong-pw" not in text


@pytest.mark.parametrize(
    "option, value, fragment",
    [
        ("maxMessagesPerTrigger", "-5", "maxMessagesPerTrigger"),
        ("brokers", "nohostport", "brokers"),
        ("startingOffsets", "earliest", "unknown option 'startingoffsets'"),
    ],
)
def test_bad_options_fail_at_load_before_consuming(
    spark: SparkSession, broker, option: str, value: str, fragment: str
) -> None:
    queue = new_queue("badopt")
    broker.produce(queue, 10)
    options = broker.reader_options(queue)
    options[option] = value
    with pytest.raises(Exception) as err:
        spark.readStream.format("clustermq").options(**options).load()
    assert fragment in str(err.value)
    assert sum(d or 0 for d in broker.depths(queue).values()) == 10  # nothing consumed
