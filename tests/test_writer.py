"""The writer (batch and streaming) against the live 3-node Classic cluster and a real local Spark.

Counts are exact: queue depths per node come from the brokers' statistics plugin, and what was
written is read back with the streaming reader (``drain`` from test_reader).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from clustermq.groups import bucket_for_group
from clustermq.options import WriteOptions
from clustermq.write.headers import staging_queue
from clustermq.write.layout import InputLayout
from clustermq.write.staging import StagedTask, move_job
from clustermq.write.task import TaskIdentity, write_task
from test_reader import drain, new_queue

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

DRIVER = Path(__file__).resolve().parent / "drivers" / "stream_to_clustermq.py"
#: the issue's acceptance run is 50,000 rows; the suite runs 20,000 to stay fast
ACCEPTANCE_ROWS = int(os.environ.get("CLUSTERMQ_WRITE_ROWS", "20000"))


def write(df: DataFrame, broker, queue: str, **options: object) -> None:
    (df.write.format("clustermq").mode("append")
     .options(**broker.reader_options(queue, **options)).save())


def read_back(spark: SparkSession, broker, queue: str, work: Path) -> tuple[DataFrame, list[dict]]:
    """Read a queue with the streaming reader (Trigger.AvailableNow), via test_reader's drain."""
    return drain(spark, broker.reader_options(queue), work)


def names(broker) -> list[str]:
    return [n.name for n in broker.cluster.nodes()]


def group_node_counts(broker, counts: Counter) -> dict[str, int]:
    """Expected depth per node when group g with counts[g] rows goes to its hash node."""
    nodes = names(broker)
    expected = {n: 0 for n in nodes}
    for group, count in counts.items():
        expected[nodes[bucket_for_group(group, len(nodes))]] += count
    return expected


# --------------------------------------------------------------------------- round trip
def test_round_trip_keeps_ids_groups_nodes_and_order(spark: SparkSession, broker, tmp_path: Path) -> None:
    """Acceptance: N rows, 500 groups, 8 partitions -> N distinct ids, each group read from
    exactly one node (its hash node), per-group order preserved."""
    queue, n, groups = new_queue("wround"), ACCEPTANCE_ROWS, 500
    df = (
        spark.range(0, n, 1, 8)
        .select("id", F.concat(F.lit("g"), (F.col("id") % groups).cast("string")).alias("group_id"))
        .repartition(8, "group_id").sortWithinPartitions("group_id", "id")
        .select(F.concat(F.lit("order-"), F.col("id").cast("string")).alias("body"), "group_id",
                F.create_map(F.lit("row"), F.col("id").cast("string")).alias("headers"))
    )
    assert df.rdd.getNumPartitions() == 8
    write(df, broker, queue)

    per_group = Counter(f"g{i % groups}" for i in range(n))
    assert dict(broker.depths(queue)) == group_node_counts(broker, per_group)  # before reading

    rows, _ = read_back(spark, broker, queue, tmp_path)
    got = rows.select(
        "node", "group_id", "batch_id", "sequence", "message_id", "body",
        F.col("headers")["row"].cast("long").alias("row"),
        F.col("headers")["clustermq_id"].alias("cid"),
        F.col("headers")["clustermq_job"].alias("job"),
    ).collect()
    assert len(got) == n
    assert len({r["cid"] for r in got}) == n and len({r["message_id"] for r in got}) == n
    assert sorted(r["row"] for r in got) == list(range(n))
    assert all(r["body"] == f"order-{r['row']}".encode() for r in got)
    assert all(r["group_id"] == f"g{r['row'] % groups}" for r in got)
    (job,) = {r["job"] for r in got}
    assert all(r["cid"].startswith(f"{job}:0:") for r in got)
    nodes = names(broker)
    group_nodes: dict[str, set[str]] = {}
    for r in got:
        group_nodes.setdefault(r["group_id"], set()).add(r["node"])
    assert len(group_nodes) == groups
    split = {g: v for g, v in group_nodes.items() if len(v) != 1}
    assert not split, f"groups read from more than one node: {dict(list(split.items())[:5])}"
    # Where the groups were written is checked by depth above. While reading, a Classic network
    # of brokers may forward a whole group over a bridge to a peer's consumer (the group sticks
    # to the bridge consumer), so the node a group is *read* from need not be its hash node.
    last: dict[str, int] = {}
    for r in sorted(got, key=lambda r: (r["batch_id"], r["sequence"])):
        assert r["row"] > last.get(r["group_id"], -1), f"group {r['group_id']} out of order"
        last[r["group_id"]] = r["row"]
    assert broker.wait_depth_zero(queue) == {name: 0 for name in nodes}


def test_headers_priority_destination_and_bodies_round_trip(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    queue, other = new_queue("wfields"), new_queue("wother")
    binary = bytes(range(256))
    rows = [  # header values may hold ':' and line breaks (STOMP 1.2 escapes them)
        (bytearray(binary), "grp-a", {"k": "v", "odd": "a:b\nc"}, 9, None, 1, True),
        (bytearray(b"plain"), None, None, None, other, 2, False),
        (bytearray(b"\x00"), "grp-a", {}, 0, None, None, None),
    ]
    df = spark.createDataFrame(
        rows, "body binary, group_id string, headers map<string,string>, priority int, "
              "destination string, n int, flag boolean",
    )
    write(df, broker, queue, headersFromColumns="true", persistent="false")
    text = spark.createDataFrame([("héllo wörld",)], "body string")
    write(text, broker, queue)

    got, _ = read_back(spark, broker, queue, tmp_path / "a")
    got_other, _ = read_back(spark, broker, other, tmp_path / "b")
    by_body = {bytes(r["body"]): r for r in got.collect()}
    assert set(by_body) == {binary, b"\x00", "héllo wörld".encode()}
    first = by_body[binary]
    assert first["group_id"] == "grp-a" and first["priority"] == 9
    assert first["headers"]["k"] == "v" and first["headers"]["odd"] == "a:b\nc"
    assert first["headers"]["n"] == "1" and first["headers"]["flag"] == "true"
    assert first["headers"].get("persistent", "false") == "false"  # persistent=false (Artemis sends the header)
    assert by_body[b"\x00"]["priority"] == 0 and "n" not in by_body[b"\x00"]["headers"]
    assert by_body["héllo wörld".encode()]["headers"]["persistent"] == "true"
    (moved,) = got_other.collect()
    assert bytes(moved["body"]) == b"plain" and moved["destination"] == broker.destination(other)
    assert moved["group_id"] is None and moved["headers"]["n"] == "2"
    for r in [*by_body.values(), moved]:
        assert not any(k in r["headers"] for k in ("clustermq_task", "clustermq_target"))


# --------------------------------------------------------------------------- load balancing
def sized_partitions(spark: SparkSession, partitions: int) -> DataFrame:
    """Partition p holds 2**p rows: a node's depth, in binary, says which tasks went there."""
    rdd = spark.sparkContext.parallelize(range(partitions), partitions).flatMap(
        lambda p: [(f"p{p}-{i}",) for i in range(2 ** p)]
    )
    return spark.createDataFrame(rdd, "body string")


def partitions_per_node(depths: dict[str, int | None], partitions: int) -> dict[str, set[int]]:
    total = sum(d or 0 for d in depths.values())
    assert total == 2 ** partitions - 1, depths
    placed = {name: {p for p in range(partitions) if (d or 0) >> p & 1} for name, d in depths.items()}
    # disjoint bit sets that add up: every task sent all its rows to exactly one node
    assert sum(len(s) for s in placed.values()) == partitions, depths
    return placed


def test_load_balancing_policies_distribute_as_promised(spark: SparkSession, broker) -> None:
    nodes = names(broker)
    placed = {}
    for policy, partitions in [("roundRobin", 6), ("firstElement", 6), ("randomSticky", 6), ("random", 10)]:
        queue = new_queue(f"wlb{policy.lower()}")
        write(sized_partitions(spark, partitions), broker, queue, loadBalancingPolicy=policy)
        placed[policy] = partitions_per_node(dict(broker.depths(queue)), partitions)

    rr = placed["roundRobin"]  # task p -> node (start + p) mod 3: every node gets p and p + 3
    assert all(len(s) == 2 for s in rr.values()), rr
    assert sorted(tuple(sorted(s)) for s in rr.values()) == [(0, 3), (1, 4), (2, 5)]
    assert placed["firstElement"][nodes[0]] == set(range(6))
    assert sorted(len(s) for s in placed["randomSticky"].values()) == [0, 0, 6]
    assert sum(1 for s in placed["random"].values() if s) >= 2  # all 10 on one node: p = 5e-5

    # grouped rows ignore the policy: they go to their group's hash node
    queue = new_queue("wlbgroups")
    df = spark.range(0, 300, 1, 3).select(
        F.col("id").cast("string").alias("body"),
        F.concat(F.lit("c"), (F.col("id") % 30).cast("string")).alias("group_id"),
    )
    write(df, broker, queue, loadBalancingPolicy="firstElement")
    expected = group_node_counts(broker, Counter(f"c{i % 30}" for i in range(300)))
    assert dict(broker.depths(queue)) == expected
    assert sum(1 for v in expected.values() if v) >= 2


# --------------------------------------------------------------------------- failures
def test_task_failing_midway_leaves_nothing_on_any_broker(spark: SparkSession, broker) -> None:
    """A UDF raising on one row after the writer got 1,500 rows of its partition: Spark ends
    the writer's input without an exception, the task's transaction commits into staging, the
    job fails and nothing reaches the queue."""
    queue = new_queue("wfail")

    @F.udf("string")
    def body(i: int) -> str:
        if i == 5500:  # partition 2 holds 4000..5999: row 1500 of it
            raise ValueError("injected failure on one row")
        return f"m{i}"

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        df = spark.range(0, 6000, 1, 3).select(
            body("id").alias("body"), F.concat(F.lit("g"), (F.col("id") % 7).cast("string")).alias("group_id")
        )
        with pytest.raises(Exception) as err:
            write(df, broker, queue)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert "injected failure on one row" in str(err.value)
    assert dict(broker.depths(queue)) == {name: 0 for name in names(broker)}


def test_null_body_fails_the_task_naming_partition_and_row(spark: SparkSession, broker) -> None:
    queue = new_queue("wnull")
    df = spark.range(0, 40, 1, 2).select(
        F.when(F.col("id") == 23, F.lit(None)).otherwise(F.col("id").cast("string")).alias("body")
    )
    with pytest.raises(Exception) as err:
        write(df, broker, queue)
    assert "row 3 of partition 1 has a null body" in str(err.value)
    assert dict(broker.depths(queue)) == {name: 0 for name in names(broker)}


@pytest.mark.parametrize(
    "columns, options, fragment",
    [
        ("body string, colour string", {}, "input column 'colour' is not a clustermq writer column"),
        ("payload string", {}, "needs a 'body' column"),
        ("body int", {}, "'body' must be binary or string, not int"),
        ("body string, headers map<string,int>", {}, "'headers' must be map<string,string>"),
        ("body string, priority string", {}, "'priority' must be an integer type"),
        ("body string, colour array<int>", {"headersFromColumns": "true"}, "'colour' cannot become a header"),
        ("body string", {"loadBalancingPolicy": "leastBusy"}, "option 'loadBalancingPolicy'"),
        ("body string", {"ackMode": "client"}, "unknown option 'ackmode' for the clustermq writer"),
    ],
)
def test_bad_input_is_a_clear_error_before_any_task(
    spark: SparkSession, broker, columns: str, options: dict, fragment: str
) -> None:
    queue = new_queue("wbad")
    df = spark.createDataFrame([], columns)
    with pytest.raises(Exception) as err:
        write(df, broker, queue, **options)
    assert fragment in str(err.value)
    assert sum(d or 0 for d in broker.depths(queue).values()) == 0


def test_bad_row_values_name_the_row(spark: SparkSession, broker) -> None:
    queue = new_queue("wbadrow")
    df = spark.createDataFrame([("a", 1), ("b", 12)], "body string, priority int").coalesce(1)
    with pytest.raises(Exception) as err:
        write(df, broker, queue)
    assert "row 1 of partition 0: priority 12 is outside 0-9" in str(err.value)
    bad_dest = spark.createDataFrame([("a", "ok.queue"), ("b", "/queue/x")], "body string, destination string").coalesce(1)
    with pytest.raises(Exception) as err:
        write(bad_dest, broker, queue)
    assert "row 1 of partition 0: destination '/queue/x' is not a queue name" in str(err.value)
    with pytest.raises(Exception) as err:
        (spark.createDataFrame([("a",)], "body string").write.format("clustermq").mode("overwrite")
         .options(**broker.reader_options(queue)).save())
    assert "overwrite" in str(err.value)
    assert sum(d or 0 for d in broker.depths(queue).values()) == 0


def test_no_reachable_node_is_a_clear_error(spark: SparkSession, free_port: int) -> None:
    df = spark.createDataFrame([("a",)], "body string")
    with pytest.raises(Exception) as err:
        (df.write.format("clustermq").mode("append").option("brokers", f"127.0.0.1:{free_port}")
         .option("queue", "q").option("username", "u").option("password", "pw-never-shown")
         .option("connectTimeout", "2000").save())
    text = str(err.value)
    assert "no broker node is reachable for writing" in text and f"127.0.0.1:{free_port}" in text
    assert "pw-never-shown" not in text


def arrow_batches(n: int, size: int, on_batch=None) -> Iterator[pa.RecordBatch]:
    for b in range(n):
        if on_batch is not None:
            on_batch(b)
        ids = range(b * size, (b + 1) * size)
        yield pa.RecordBatch.from_arrays([pa.array([f"m{i}" for i in ids])], names=["body"])


def first_node_options(broker, queue: str, **extra: str) -> WriteOptions:
    """Writer options that route every row to node 0 (the node the fault tests kill)."""
    username, password = broker.cluster.credentials
    return WriteOptions.parse({"brokers": broker.cluster.brokers, "queue": queue,
                               "username": username, "password": password,
                               "loadBalancingPolicy": "firstElement", "receiptTimeout": "10000",
                               **extra})


def test_node_lost_mid_transaction_or_down_at_start_loses_nothing(
    spark: SparkSession, broker
) -> None:
    """Node 0 dies while a task's transaction on it is open (the task re-sends the transaction
    to node 1), then a Spark job writes while node 0 is still down (rows go to the next node)."""
    cluster = broker.cluster
    nodes = names(broker)
    queue = new_queue("wnodeloss")
    options = first_node_options(broker, queue)
    job = uuid.uuid4().hex

    def kill_node0_after_three_batches(b: int) -> None:
        if b == 3:
            cluster.kill_node(0)

    try:
        message = write_task(options, InputLayout(body="body", body_is_text=True),
                             TaskIdentity(job, 0, 0, 0), arrow_batches(10, 100, kill_node0_after_three_batches))
        assert message.rows == 1000 and message.counts == {1: 1000}  # node 0's 300 re-sent
        assert nodes[0] in message.unavailable
        moves = move_job(options, job, [StagedTask(message.task_tag, message.counts)], queue)
        assert [(m.node, m.moved) for m in moves] == [(nodes[1], 1000)]
        depths = broker.depths(queue)
        assert depths[nodes[1]] == 1000 and depths[nodes[2]] == 0 and depths[nodes[0]] is None
        assert broker.depths(staging_queue(queue, job, 1))[nodes[1]] == 0

        grouped = new_queue("wnodedown")
        df = spark.range(0, 600, 1, 6).select(
            F.col("id").cast("string").alias("body"),
            F.concat(F.lit("k"), (F.col("id") % 60).cast("string")).alias("group_id"),
        )
        write(df, broker, grouped, connectTimeout=3000)
        expected = group_node_counts(broker, Counter(f"k{i % 60}" for i in range(600)))
        expected = {nodes[0]: None, nodes[1]: expected[nodes[0]] + expected[nodes[1]], nodes[2]: expected[nodes[2]]}
        assert dict(broker.depths(grouped)) == expected  # node 0's groups went to node 1, whole
    finally:
        if not cluster.is_running(0):
            cluster.start_node(0)
    assert broker.depths(queue)[nodes[0]] == 0  # the lost transaction never committed


def test_node_killed_during_the_move_out_of_staging_loses_nothing(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """Node 0 SIGKILLed while the driver moves a job's staged messages into the queue.

    The move fails naming the node; what it had committed stays in the queue, the rest stays
    staged (persistent). After the restart the batch runs again as Spark re-runs a failed
    streaming batch (a new task attempt, same query and batch, so the same ``clustermq_id``s)
    and its move drops the old attempt's staged copies: every row is in the queue at least
    once, copies carry the same id (Classic) or are dropped by the broker (Artemis).
    """
    from clustermq.errors import MoveError

    cluster = broker.cluster
    nodes = names(broker)
    queue = new_queue("wmovekill")
    options = first_node_options(broker, queue, connectTimeout="3000")
    total = 10_000
    job = uuid.uuid4().hex
    layout = InputLayout(body="body", body_is_text=True)
    first = write_task(options, layout, TaskIdentity(job, 0, 0, 0), arrow_batches(10, total // 10))
    assert first.counts == {0: total}
    failure: list[BaseException] = []

    def move() -> None:
        try:
            move_job(options, job, [StagedTask(first.task_tag, first.counts)], queue)
        except BaseException as exc:
            failure.append(exc)

    mover = threading.Thread(target=move)
    mover.start()
    moved_at_kill = 0
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and mover.is_alive():
            moved_at_kill = broker.depths(queue, timeout=5)[nodes[0]] or 0
            if moved_at_kill >= 200:  # at least one move transaction committed
                break
        assert 0 < moved_at_kill < total, f"the move was not caught midway ({moved_at_kill})"
        cluster.kill_node(0)
        mover.join(120)
        assert not mover.is_alive()
        assert failure and isinstance(failure[0], MoveError), failure
        text = str(failure[0])
        assert nodes[0] in text and "stay in the staging queues" in text, text
    finally:
        mover.join(120)
        if not cluster.is_running(0):
            cluster.start_node(0)

    staged_left = broker.depths(staging_queue(queue, job, 0))[nodes[0]] or 0
    in_queue = broker.depths(queue)[nodes[0]] or 0
    assert staged_left > 0 and in_queue > 0, (staged_left, in_queue)
    assert in_queue + staged_left >= total, (in_queue, staged_left)  # nothing lost by the crash

    # Spark re-runs the failed batch: a new attempt of the same task, then the driver's move.
    second = write_task(options, layout, TaskIdentity(job, 0, 0, 1), arrow_batches(10, total // 10))
    moves = move_job(options, job, [StagedTask(second.task_tag, second.counts)], queue)
    assert [(m.node, m.moved) for m in moves] == [(nodes[0], total)]
    assert broker.depths(staging_queue(queue, job, 0))[nodes[0]] == 0

    rows, _ = read_back(spark, broker, queue, tmp_path / "read")
    got = rows.select(F.col("body").cast("string").alias("body"),
                      F.col("headers")["clustermq_id"].alias("cid")).collect()
    by_id: dict[str, set[str]] = {}
    for r in got:
        by_id.setdefault(r["cid"], set()).add(r["body"])
    assert sorted(by_id) == sorted(f"{job}:0:0:{i}" for i in range(total))
    assert all(len(bodies) == 1 for bodies in by_id.values())  # a copy is the same message
    copies = len(got) - total
    if broker.flavor == "artemis":
        assert copies == 0, f"{copies} copies: the broker should drop them by _AMQ_DUPL_ID"
    else:
        assert copies == in_queue, (copies, in_queue)  # every message moved before the crash, once more
    print(f"\n[{broker.flavor}] killed with {moved_at_kill}+ of {total} moved; after restart "
          f"{in_queue} in the queue, {staged_left} staged; {copies} copies in the end")


# --------------------------------------------------------------------------- streaming
def run_stream_driver(broker, queue: str, work: Path, log: Path) -> dict:
    username, password = broker.cluster.credentials
    env = dict(os.environ, CLUSTERMQ_USERNAME=username, CLUSTERMQ_PASSWORD=password,
               PYSPARK_PYTHON=sys.executable)
    args = [sys.executable, str(DRIVER), "--brokers", broker.cluster.brokers, "--queue", queue,
            "--input", str(work / "in"), "--checkpoint", str(work / "checkpoint"),
            "--fail-flag", str(work / "fail")]
    with log.open("ab") as out:
        done = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=out, timeout=240,
                              start_new_session=True)
    assert done.returncode == 0, log.read_text()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def test_streaming_writer_commits_per_batch_and_a_failed_batch_publishes_nothing(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """Three files = three micro-batches; the third fails part-way in its first run (nothing
    of it reaches the queue), then succeeds on restart with the same deterministic ids."""
    queue = new_queue("wstream")
    (tmp_path / "in").mkdir()
    for f in range(3):  # one Parquet file per batch, in modification-time order
        rows = [(f * 1000 + i, f"s{i % 9}", f == 2 and i == 700) for i in range(1000)]
        spark.createDataFrame(rows, "n long, grp string, fail boolean").coalesce(1) \
            .write.parquet(str(tmp_path / f"tmp{f}"))
        (part,) = (tmp_path / f"tmp{f}").glob("part-*.parquet")
        part.rename(tmp_path / "in" / f"f{f}.parquet")
    (tmp_path / "fail").touch()
    log = tmp_path / "driver.log"

    first = run_stream_driver(broker, queue, tmp_path, log)
    assert "injected failure at row 2700" in (first["error"] or "")
    query = first["query_id"]
    assert sum(d or 0 for d in broker.depths(queue).values()) == 2000  # batches 0 and 1 only
    text = log.read_text()
    for batch in (0, 1):
        assert f"clustermq: query {query} batch {batch} committed 1000 messages" in text
    assert "batch 2 aborted: nothing was published" in text

    (tmp_path / "fail").unlink()
    second = run_stream_driver(broker, queue, tmp_path, log)
    assert second == {"query_id": query, "error": None}
    text = log.read_text()
    assert f"clustermq: query {query} batch 2 committed 1000 messages" in text
    line = next(l for l in text.splitlines() if f"query {query} batch 2 committed" in l)
    assert all(f"{name}=" in line for name in names(broker))  # counts per node

    rows, _ = read_back(spark, broker, queue, tmp_path / "read")
    got = rows.select(F.col("headers")["n"].cast("long").alias("n"),
                      F.col("headers")["clustermq_id"].alias("cid"), "group_id", "node").collect()
    assert sorted(r["n"] for r in got) == list(range(3000))
    ids = {r["n"]: r["cid"] for r in got}
    for n in (0, 999, 1000, 2000, 2999):
        assert ids[n] == f"{query}:{n // 1000}:0:{n % 1000}"
    placement: dict[str, set[str]] = {}
    for r in got:
        placement.setdefault(r["group_id"], set()).add(r["node"])
    assert all(len(v) == 1 for v in placement.values())
