"""Faults with exact counts: a killed driver process, a killed broker node."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from waits import artemis_queue_state, bridge_failures, dead_letters, log_marks, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

JOB = Path(__file__).resolve().parents[1] / "spark_jobs" / "queue_to_parquet.py"


#: AvailableNow restarts after a killed driver wait this long for quiet: longer than a Classic
#: bridge takes to be rebuilt (10 s inactivity + reconnect), since a bridge that died with the
#: driver holds its in-flight messages until then. It equals the option's default; kept
#: explicit so that the kill tests do not depend on it.
RESTART_IDLE_OPTION = ["--option", "availableNowIdleTimeout=30000"]


def acknowledged_in_log(text: str) -> int:
    """Messages the reader says it acknowledged (consumer.py logs every ACK round at INFO)."""
    return sum(n for n, _ in acknowledgements(text))


def batch_end_offsets(checkpoint: Path) -> dict[int, dict[str, int]]:
    """Each planned batch's end offsets per node: the source's line of ``offsets/<batch>``
    (a version line, the batch metadata, then one line per source)."""
    offsets = checkpoint / "offsets"
    return {int(p.name): json.loads(p.read_text().splitlines()[2])
            for p in offsets.iterdir() if p.name.isdigit()} if offsets.exists() else {}


def sink_batch_ids(out: Path) -> dict[int, set[int]]:
    """``loadgen_id`` of the rows of each batch the file sink committed (its ``_spark_metadata``
    log names each batch's files)."""
    meta = out / "_spark_metadata"
    batches: dict[int, set[int]] = {}
    for entry in meta.iterdir() if meta.exists() else []:
        if not entry.name.isdigit():
            continue
        ids: set[int] = set()
        for line in entry.read_text().splitlines()[1:]:
            path = json.loads(line)["path"].removeprefix("file://")
            ids |= {int(dict(h)["loadgen_id"]) for h in pq.read_table(path, columns=["headers"])
                    .column("headers").to_pylist()}
        batches[int(entry.name)] = ids
    return batches


def acknowledgements(text: str) -> list[tuple[int, dict[str, int]]]:
    """The reader's ACK rounds in order: messages acknowledged, and the offsets up to which."""
    return [(int(n), ast.literal_eval(upto)) for n, upto in
            re.findall(r"clustermq: acknowledged (\d+) messages up to (\{[^}]*\})", text)]


def connector_lines(text: str, last: int) -> str:
    """The driver log's last ``last`` lines from the connector (logs.py), for a failure message."""
    return "\n".join([line for line in text.splitlines() if "clustermq" in line][-last:])


def committed_batches(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0


def start_driver(broker, queue: str, out: Path, checkpoint: Path, trigger: str, log: Path) -> subprocess.Popen:
    username, password = broker.cluster.credentials
    env = dict(os.environ, CLUSTERMQ_USERNAME=username, CLUSTERMQ_PASSWORD=password)
    args = [sys.executable, str(JOB), "--brokers", broker.cluster.brokers, "--queue", queue,
            "--out", str(out), "--checkpoint", str(checkpoint), "--trigger", trigger,
            "--max-messages-per-trigger", "400", "--option", "replayTimeout=20000",
            *RESTART_IDLE_OPTION]
    return subprocess.Popen(args, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the driver and its Spark JVM (same process group); reap the leader."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


class Row(NamedTuple):
    i: int
    node: str
    redelivered: bool
    message_id: str


def rows_in(spark: SparkSession, out: Path) -> list[Row]:
    """Every row the sink committed: the producer's id and where and how it was delivered."""
    return [Row(*r) for r in spark.read.parquet(str(out)).select(
        F.col("headers")["loadgen_id"].cast("int"), "node", "redelivered", "message_id").collect()]


def ids_in(spark: SparkSession, out: Path) -> list[int]:
    rows = spark.read.parquet(str(out)).select(F.col("headers")["loadgen_id"].cast("int")).collect()
    return [r[0] for r in rows]


def test_killed_driver_loses_nothing_and_acks_only_committed(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """SIGKILL at the sharpest moment: the sink has committed a batch, Spark's commit log not.

    The restart replays nothing into the sink (the file sink skips a batch id it already holds,
    and the reader is not even asked for its partitions), so that batch's messages, never
    acknowledged, come again and are written in a later batch: exactly the rows of the batches
    the killed run wrote and did not acknowledge reach the sink twice.
    """
    queue = f"test.kill.{uuid.uuid4().hex[:8]}"
    total = 6000
    marks = log_marks(broker)
    broker.produce(queue, total)
    out, checkpoint, log = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "driver.log"

    proc = start_driver(broker, queue, out, checkpoint, "processingTime=200 milliseconds", log)
    batch = 2  # kill once the sink has committed this batch and Spark's commit log has not
    try:
        deadline = time.monotonic() + 180
        while proc.poll() is None and time.monotonic() < deadline and batch < 9:
            if (checkpoint / "commits" / str(batch)).exists():
                batch += 1  # that moment was missed: the next batch's
            elif (out / "_spark_metadata" / str(batch)).exists():
                break
            time.sleep(0.001)
        # (batch 9's sink log is a compaction of all before it: per-batch ids end there)
        assert proc.poll() is None and time.monotonic() < deadline and batch < 9, \
            f"batch {batch}: " + log.read_text()[-3000:]
    finally:
        kill_group(proc)
    in_window = not (checkpoint / "commits" / str(batch)).exists()

    # The reader acknowledges a batch when Spark asks for the next one (latestOffset): its last
    # ACK line names the end offsets of a committed batch (``acked``, the last or the one before),
    # each message acknowledged once; the sink's batches after it are written, not acknowledged.
    committed = committed_batches(checkpoint)
    ends = batch_end_offsets(checkpoint)
    acks = acknowledgements(log.read_text())
    assert acks, connector_lines(log.read_text(), 20)
    logged = sum(n for n, _ in acks)
    acked = max([b for b, end in ends.items() if end == acks[-1][1]], default=-1)
    assert acked in (committed - 1, committed - 2), (acks[-1], committed, ends)
    assert logged == sum(ends[acked].values()), (logged, acks)
    written = sink_batch_ids(out)
    unacknowledged = {i for b, ids in written.items() if b > acked for i in ids}
    assert max(written) == batch and len(unacknowledged) > 0, (sorted(written), acked)
    # The brokers' side: every row of the acknowledged batches acknowledged, none of the rest.
    # A Classic copy made while the dead consumer's messages move between nodes adds one to
    # the depth (5,601 settled for 5,600 in a CI run): one less acknowledged, never one more.
    remaining = sum(d or 0 for d in broker.settled_depths(queue).values())
    acknowledged = total - remaining
    print(f"\n[{broker.flavor}] killed {'between' if in_window else 'after'} the sink's and "
          f"Spark's commit of batch {batch}: {sum(map(len, written.values()))} rows written, "
          f"{logged} acknowledged by the reader's log, {acknowledged} by the brokers' depth")
    copy_allowance = 1 if broker.flavor == "classic" else 0
    assert logged - copy_allowance <= acknowledged <= logged, (acknowledged, logged)

    def drain() -> None:
        proc = start_driver(broker, queue, out, checkpoint, "availableNow", log)
        try:
            assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                kill_group(proc)

    drain()
    ids = ids_in(spark, out)
    missing = set(range(total)) - set(ids)
    if missing:
        raise AssertionError(
            f"missing {len(missing)} (e.g. {sorted(missing)[:5]}); depths now "
            f"{broker.settled_depths(queue)}, dead letters {broker.depths(dead_letters(broker))}"
            + (f", queue state {artemis_queue_state(broker, queue)}" if broker.flavor == "artemis" else "")
            + "; driver log:\n" + connector_lines(log.read_text(), 40))
    not_again = unacknowledged - {i for i, n in Counter(ids).items() if n > 1}
    if not_again and broker.flavor == "artemis":
        # Artemis 2.40 can keep one delivered, unacknowledged message of a failed connection
        # counted on its node and give it to no consumer (docs/broker-behaviour.md, "A message
        # stranded after a killed driver"): at most one per killed consumer connection, still
        # counted, and a restart of its node returns it. Exactly that is required, then the
        # accounting below as for every other run.
        stranded = broker.restart_nodes_holding(queue)
        print(f"[{broker.flavor}] {sorted(not_again)} not redelivered after the restart; "
              f"still counted {stranded}: those nodes restarted, draining again")
        assert len(not_again) <= len(broker.cluster.nodes()), sorted(not_again)[:20]
        assert sum(stranded.values()) == len(not_again), (stranded, sorted(not_again))
        drain()
    copies: dict[int, list[tuple[bool, str, str]]] = {}
    for r in spark.read.parquet(str(out)).select(
            F.col("headers")["loadgen_id"].cast("int").alias("i"), "redelivered", "node",
            "message_id").collect():
        copies.setdefault(r["i"], []).append((r["redelivered"], r["node"], r["message_id"]))
    duplicated = {i: c for i, c in copies.items() if len(c) > 1}
    print(f"[{broker.flavor}] {len(ids)} rows, {len(duplicated)} ids written twice of "
          f"{len(unacknowledged)} written and not acknowledged "
          f"({sum(any(f for f, _, _ in c) for c in duplicated.values())} with a copy flagged "
          f"redelivered, {sum(len({m for _, _, m in c}) == 1 for c in duplicated.values())} "
          "with one message_id)")
    bridged = {i: c for i, c in duplicated.items() if i not in unacknowledged}
    if bridged and broker.flavor == "classic":
        # A Classic bridge that failed while it forwarded sends again what it had not seen
        # acknowledged, and the copy keeps the message_id (docs/broker-behaviour.md, "Copies made
        # by a failed bridge"; a clean-clone run read one such id in two batches of the drain,
        # each copy flagged, after node0's bridge to node2 was "Disposed due to prior
        # exception"). Allowed only with a failed bridge in the brokers' logs, one message_id
        # per id, two copies, and at most a bridge's prefetch (BRIDGE_COPIES).
        from test_reader import BRIDGE_COPIES

        failed = bridge_failures(broker, marks)
        assert failed, (f"{len(bridged)} ids written twice that the first run acknowledged or never "
                        f"wrote, and no bridge failed: {list(bridged.items())[:5]}")
        assert all(len(c) == 2 and len({m for _, _, m in c}) == 1 for c in bridged.values()), \
            list(bridged.items())[:5]
        assert len(bridged) <= BRIDGE_COPIES["classic"], (len(bridged), failed[:3])
        print(f"[{broker.flavor}] {len(bridged)} ids copied by a failed bridge ({failed[0][:160]}): "
              f"{list(bridged.items())[:3]}")
        duplicated = {i: c for i, c in duplicated.items() if i in unacknowledged}
    # Exactly the rows written and not acknowledged reach the sink twice, each once more; a
    # row emitted twice by one run, or an acknowledged one redelivered, would show here.
    assert set(duplicated) == unacknowledged, (
        f"ids written twice and not, against those written and not acknowledged "
        f"(symmetric difference): {sorted(set(duplicated) ^ unacknowledged)[:20]}; copies: "
        f"{[(i, copies[i]) for i in sorted(set(duplicated) - unacknowledged)[:5]]}")
    assert all(len(c) == 2 for c in duplicated.values()), {i: c for i, c in duplicated.items() if len(c) > 2}

    def explained(c: list[tuple[bool, str, str]]) -> bool:
        """README, "A crashed driver loses nothing": Classic flags the copy and keeps the
        message_id (400 of 400 in three runs). Artemis does not flag all of them: of 400
        written twice, 135-267 were flagged and 266-370 came again with the same message_id in
        four runs; the rest were moved to another node with a new message_id (found by
        ``loadgen_id``)."""
        flagged = any(flag for flag, _, _ in c)
        same_message = len({m for _, _, m in c}) == 1
        if broker.flavor == "classic":
            return flagged and same_message
        moved = len({node for _, node, _ in c}) > 1
        return flagged or same_message or moved

    unexplained = {i: c for i, c in duplicated.items() if not explained(c)}
    assert not unexplained, (len(unexplained), list(unexplained.items())[:5])
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_node_killed_and_restarted_mid_stream_loses_nothing(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    queue = f"test.nodekill.{uuid.uuid4().hex[:8]}"
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = broker.reader_options(
        queue, maxMessagesPerTrigger=300, initialReconnectDelay=200, maxReconnectDelay=1000,
    )
    query = (
        spark.readStream.format("clustermq").options(**options).load()
        .writeStream.format("parquet").option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds").start()
    )
    nodes = [n.name for n in broker.cluster.nodes()]
    victim = 1
    outage = range(3000, 5000)  # the load generator sends id i to nodes[0, 2][i % 2]
    try:
        broker.produce(queue, 3000, first_id=0)
        wait_for(lambda: out.exists() and committed_batches(checkpoint) >= 2, 120, "first batches")
        broker.cluster.kill_node(victim)
        broker.produce(queue, 2000, first_id=3000, nodes=[0, 2])

        def outage_arrivals() -> tuple[Counter[str], Counter[str]]:
            """Of the messages produced while the node is down: how many arrived per node
            they were sent to, and per node they were read from."""
            rows = [r for r in rows_in(spark, out) if r.i in outage]
            sent = Counter(nodes[0] if r.i % 2 == 0 else nodes[2] for r in {r.i: r for r in rows}.values())
            return sent, Counter(r.node for r in rows)

        # Every one of them, while the node is down: each survivor has a consumer of its own,
        # so it keeps its new messages (Artemis: OFF_WITH_REDISTRIBUTION; with ON_DEMAND each
        # survivor kept routing a share to the dead node's store-and-forward queue, and those
        # arrived only after the restart).
        wanted = len(outage) // 2

        def each_survivor_delivers() -> bool:
            sent, read = outage_arrivals()
            return all(sent[nodes[i]] >= wanted and read[nodes[i]] > 0 for i in (0, 2))

        wait_for(each_survivor_delivers, 120, f"{wanted} of each survivor's messages while a node was down")
        sent, read = outage_arrivals()
        print(f"\n[{broker.flavor}] while node {victim} was down: arrived per node sent to "
              f"{dict(sent)}, per node read from {dict(read)}")
        assert query.isActive and query.exception() is None
        broker.cluster.start_node(victim)
        broker.produce(queue, 1000, first_id=5000)
        wait_for(lambda: set(ids_in(spark, out)) >= set(range(6000)), 180,
                 "every message, including those persisted on the restarted node", interval=1.0)
        assert query.isActive and query.exception() is None
        wait_for(lambda: all(d == 0 for d in broker.depths(queue).values()), 60, "empty queue")
    finally:
        query.stop()
    rows = rows_in(spark, out)
    assert {r.i for r in rows} == set(range(6000))
    copies: dict[int, list[Row]] = {}
    for r in rows:
        copies.setdefault(r.i, []).append(r)
    duplicated = {i: c for i, c in copies.items() if len(c) > 1}
    same_id = sum(len({r.message_id for r in c}) == 1 for c in duplicated.values())
    flagged = sum(any(r.redelivered for r in c) for c in duplicated.values())
    print(f"[{broker.flavor}] {len(rows)} rows, {len(duplicated)} ids twice ({same_id} with one "
          f"message_id, {flagged} with a copy flagged redelivered)")
    # README, "A dead node does not stop the query": the planned messages of the broken
    # connection are emitted and redelivered once the node is back. So a duplicate is one of the
    # victim's: at most its share of the batch whose ACK was due and of the planned one, each
    # read twice, one copy from the victim. Measured: 100 (Artemis) and 150 (Classic) of a
    # 300-message batch. Classic redelivers with the same message_id; Artemis too, or with a
    # new one after moving it. The restarted broker does not flag them: Classic forgets the
    # flag without persistJMSRedelivered, Artemis did not set it (0 of 100 in four runs).
    # On Classic a second kind, copies made by a bridge to or from the victim that the kill cut
    # before the receiving store's acknowledgement got back (broker-behaviour.md, "Copies made
    # by a failed bridge"), both with one message_id, each read once from each survivor:
    # - produced to the victim, forwarded by it to a survivor (read there) and again, after the
    #   restart, to the other survivor; neither copy flagged (a clean-clone run: 20 such ids);
    # - produced to a survivor, forwarded by it to the victim, whose store kept it: the
    #   survivor takes it back and reads it out flagged `redelivered`, and the victim forwards
    #   its stored copy to the other survivor after the restart (a clean-clone run had 48
    #   duplicated ids of neither other kind; the five its failure listed were of this one).
    # They count toward the bound of 2 × 300: 120 and 248 duplicated ids in all in those runs.
    def explained(i: int, copies: list[Row]) -> bool:
        if len(copies) != 2:
            return False
        if nodes[victim] in {r.node for r in copies}:  # a planned message, redelivered
            return True
        if broker.flavor != "classic" or i >= 3000:  # bridges to the victim: the first produce only
            return False
        origin = nodes[i % len(nodes)]  # first produce: id i to node i % 3
        if origin == nodes[victim]:
            return True
        on_origin = [r for r in copies if r.node == origin]
        return len(on_origin) == 1 and on_origin[0].redelivered  # the other copy: another survivor

    assert len(duplicated) <= 2 * 300, len(duplicated)
    unexplained = {i: c for i, c in duplicated.items() if not explained(i, c)}
    assert not unexplained, (
        f"{len(unexplained)} of {len(duplicated)} duplicated ids are neither read once from the victim "
        f"({nodes[victim]}) nor, on Classic, a copy made by a bridge to or from it: {sorted(unexplained.items())[:5]}")
    if broker.flavor == "classic":
        assert same_id == len(duplicated), [c for c in duplicated.values() if len({r.message_id for r in c}) > 1][:5]
    else:
        assert all(len({r.message_id for r in c}) == 1 or len({r.node for r in c}) > 1
                   for c in duplicated.values())
