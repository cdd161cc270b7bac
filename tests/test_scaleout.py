"""Past one driver: several queue_to_delta queries on one queue, into one Delta table.

One query reads in one Python process on the driver; to read faster, a user runs more queries on
the same queue, each a competing consumer with its own driver and checkpoint. This proves that
they share the queue and the table exactly once: every message in the table once, every query
writing part of it, the queue empty afterwards.
"""

from __future__ import annotations

import re
import signal
import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from test_pipelines import finish, job_command, job_env, loadgen_ids, start_job, tail
from test_reader_faults import kill_group
from waits import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

QUERIES = 2
WRITTEN = re.compile(r"^batch \d+: (\d+) rows read, \d+ duplicates within the batch, "
                     r"\d+ already in the table, (\d+) written", re.M)


def written_by(log: Path) -> int:
    """Rows a queue_to_delta driver reports written, over its batch lines so far."""
    return sum(int(w) for _, w in WRITTEN.findall(log.read_text(errors="replace"))) if log.exists() else 0


def test_two_queue_to_delta_drivers_share_one_queue_and_one_table_exactly_once(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """Two drivers (separate processes, separate checkpoints) read one queue into one table.

    Both are subscribed on every node before the messages are sent, so each node hands its
    messages to both as competing consumers and both must write. Small batches (1,000 messages
    over all nodes) make their appends, and the table's creation by their first batches, meet
    as concurrent Delta transactions, not one after the other.
    """
    queue = f"test.scaleout.{uuid.uuid4().hex[:8]}"
    total = 12_000
    nodes = len(broker.cluster.nodes())
    table = tmp_path / "table"
    dedupe = ["--dedupe", "all", "--id-header", "loadgen_id"] if broker.flavor == "artemis" else []
    procs, logs = [], [tmp_path / f"driver{i}.log" for i in range(QUERIES)]

    def state() -> str:
        return "\n\n".join(f"driver {i} ({written_by(log)} written):\n{tail(log, 3000)}"
                            for i, log in enumerate(logs))

    try:
        for i, log in enumerate(logs):
            args = ["--brokers", broker.cluster.brokers, "--queue", queue, "--table", str(table),
                    "--checkpoint", str(tmp_path / f"checkpoint{i}"),
                    "--trigger", "processingTime=1 second", "--max-messages-per-trigger", "1000",
                    *dedupe]
            procs.append(start_job(job_command("queue_to_delta"), args, job_env(broker), log))
        for i, log in enumerate(logs):
            wait_for(lambda: tail(log, 10**6).count(f"subscribed to {queue} on node") >= nodes, 180,
                     f"driver {i} to subscribe on all {nodes} nodes", explain=state)
        broker.produce(queue, total)
        wait_for(lambda: sum(map(written_by, logs)) >= total, 300,
                 f"the drivers to write {total} rows", explain=state)
        # A driver prints a batch's line from inside the batch, before Spark commits it, and the
        # reader acknowledges a batch at the query's next trigger: a driver stopped before that
        # gives its last batch back to the queue (the reader's guarantee), where no consumer is
        # left. So the stop waits, with both drivers running, until every node's queue is empty.
        acked = broker.wait_depth_zero(queue, 60)
        assert all(d == 0 for d in acked.values()), (
            f"messages not acknowledged 60 s after the drivers wrote {total} rows: {acked}\n{state()}")
        for proc in procs:
            proc.send_signal(signal.SIGTERM)  # a clean stop: the job returns 0
        codes = [finish(proc, 120, log) for proc, log in zip(procs, logs)]
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_group(proc)
    assert codes == [0] * QUERIES, state()

    written = [written_by(log) for log in logs]
    print(f"\n[{broker.flavor}] rows written per driver: {written}")
    assert all(n > 0 for n in written), f"a driver wrote nothing: {written}"
    rows = spark.read.format("delta").load(str(table))
    ids = loadgen_ids(rows)
    assert sum(written) == len(ids), (written, len(ids))
    assert sorted(ids) == list(range(total)), (
        f"{len(ids)} rows, {len(set(ids))} distinct ids of {total}; missing "
        f"{sorted(set(range(total)) - set(ids))[:20]}")
    left = broker.wait_depth_zero(queue)
    assert all(d == 0 for d in left.values()), (
        f"messages left after both drivers stopped, all acknowledged before the stop: {left}")


def test_the_retried_conditions_are_delta_s_own() -> None:
    """The sink retries on Delta's error conditions by name; each must exist in the pinned Delta
    release's error classes, or a renamed one would silently stop being retried."""
    import json
    import zipfile

    from clustermq.pipelines.delta_jars import delta_jars
    from clustermq.pipelines.delta_sink import CONCURRENT_COMMIT_CONDITIONS

    jar = next(p for p in delta_jars() if p.name.startswith("delta-spark_"))
    with zipfile.ZipFile(jar) as z:
        conditions = set(json.loads(z.read("error/delta-error-classes.json")))
    assert CONCURRENT_COMMIT_CONDITIONS <= conditions, sorted(CONCURRENT_COMMIT_CONDITIONS - conditions)
