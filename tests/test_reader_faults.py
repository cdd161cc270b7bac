"""Faults with exact counts: a killed driver process, a killed broker node."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

JOB = Path(__file__).resolve().parents[1] / "spark_jobs" / "queue_to_parquet.py"


def wait_for(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


#: AvailableNow restarts after a killed driver wait this long for quiet: longer than a Classic
#: bridge takes to be rebuilt (10 s inactivity + reconnect), since a bridge that died with the
#: driver holds its in-flight messages until then. It equals the option's default; kept
#: explicit so that the kill tests do not depend on it.
RESTART_IDLE_OPTION = ["--option", "availableNowIdleTimeout=30000"]


def acknowledged_in_log(text: str) -> int:
    """Messages the reader says it acknowledged (consumer.py logs every ACK round at INFO)."""
    return sum(int(n) for n in re.findall(r"clustermq: acknowledged (\d+) messages", text))


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


def ids_in(spark: SparkSession, out: Path) -> list[int]:
    rows = spark.read.parquet(str(out)).select(F.col("headers")["loadgen_id"].cast("int")).collect()
    return [r[0] for r in rows]


def test_killed_driver_loses_nothing_and_acks_only_committed(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    queue = f"test.kill.{uuid.uuid4().hex[:8]}"
    total = 6000
    broker.produce(queue, total)
    out, checkpoint, log = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "driver.log"

    proc = start_driver(broker, queue, out, checkpoint, "processingTime=200 milliseconds", log)
    try:
        wait_for(lambda: committed_batches(checkpoint) >= 3 or proc.poll() is not None, 180,
                 "three committed batches")
        assert proc.poll() is None, log.read_text()[-3000:]
    finally:
        kill_group(proc)

    # Only messages of committed batches may have been acknowledged. The broker's count is an
    # upper bound only: a Classic copy made while the dead consumer's messages move between
    # nodes adds one to the depth (5,601 settled for 5,600 in a CI run), so that the committed
    # batches' ACKs are shown by the reader's log instead.
    committed_rows = len(ids_in(spark, out))
    remaining = sum(d or 0 for d in broker.settled_depths(queue).values())
    acknowledged = total - remaining
    assert acknowledged <= committed_rows, (acknowledged, committed_rows)
    assert 0 < acknowledged_in_log(log.read_text()) <= committed_rows, connector_lines(log.read_text(), 20)

    proc = start_driver(broker, queue, out, checkpoint, "availableNow", log)
    try:
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            kill_group(proc)

    ids = ids_in(spark, out)
    missing = set(range(total)) - set(ids)
    if missing:
        raise AssertionError(
            f"missing {len(missing)} (e.g. {sorted(missing)[:5]}); depths now "
            f"{broker.settled_depths(queue)}, dead letters {broker.depths('ActiveMQ.DLQ')}; "
            "driver log:\n" + connector_lines(log.read_text(), 40))
    # Duplicates come only from redelivery, as the README says a sink can find them. Classic:
    # the copy is flagged ``redelivered``. Artemis does not flag all of them: of 400 written
    # twice in one measured run, 132 were flagged, 237 came again from the same node with the
    # same message_id and no flag (found by ``--dedupe all``), 31 were moved to another node
    # with a new message_id (found by a producer id, here ``loadgen_id``).
    copies: dict[int, list[tuple[bool, str, str]]] = {}
    for r in spark.read.parquet(str(out)).select(
            F.col("headers")["loadgen_id"].cast("int").alias("i"), "redelivered", "node",
            "message_id").collect():
        copies.setdefault(r["i"], []).append((r["redelivered"], r["node"], r["message_id"]))

    def explained(c: list[tuple[bool, str, str]]) -> bool:
        if any(flag for flag, _, _ in c):
            return True
        same_message = len({m for _, _, m in c}) == 1
        moved = len({node for _, node, _ in c}) > 1
        return broker.flavor == "artemis" and (same_message or moved)

    unexplained = {i: c for i, c in copies.items() if len(c) > 1 and not explained(c)}
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
    victim = 1
    try:
        broker.produce(queue, 3000, first_id=0)
        wait_for(lambda: out.exists() and committed_batches(checkpoint) >= 2, 120, "first batches")
        broker.cluster.kill_node(victim)
        # the others keep working while the node is down
        broker.produce(queue, 2000, first_id=3000, nodes=[0, 2])
        # Classic: all of them. Artemis: the survivors can route a message to the dead node's
        # store-and-forward queue before they notice it is gone (ON_DEMAND keeps its remote
        # binding until then; a clean-clone CI run waited 120 s for the last ones); those arrive
        # after the restart, which the final check below requires. Half proves the rest work.
        wanted = 2000 if broker.flavor == "classic" else 1000
        wait_for(lambda: len(set(ids_in(spark, out)) & set(range(3000, 5000))) >= wanted, 120,
                 f"{wanted} of the messages produced while a node was down")
        assert query.isActive and query.exception() is None
        broker.cluster.start_node(victim)
        broker.produce(queue, 1000, first_id=5000)
        wait_for(lambda: set(ids_in(spark, out)) >= set(range(6000)), 180,
                 "every message, including those persisted on the restarted node", interval=1.0)
        assert query.isActive and query.exception() is None
        wait_for(lambda: all(d == 0 for d in broker.depths(queue).values()), 60, "empty queue")
    finally:
        query.stop()
    ids = ids_in(spark, out)
    assert set(ids) == set(range(6000))
