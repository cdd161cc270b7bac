"""``writeMode=direct``: what a failed job and a retried task leave in the queue, counted exactly.

Direct mode skips staging, so the guarantees differ from the atomic default (README: Writing,
Direct mode): a task that committed keeps its rows whatever happens to the job later, and a task
that runs again re-publishes its rows with the same ``clustermq_id``s, which Artemis drops by
duplicate id and Classic keeps as copies.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from clustermq.options import WriteOptions
from clustermq.write.headers import STAGING_PREFIX
from clustermq.write.layout import InputLayout
from clustermq.write.modes import Direct
from clustermq.write.task import TaskIdentity, write_task
from test_reader import drain, new_queue
from test_writer import names, parquet_batch, run_stream_driver, staging_queues, write

pytestmark = [pytest.mark.cluster, pytest.mark.spark]


def _ids(spark: SparkSession, broker, queue: str, work: Path) -> Counter[str]:
    """Every ``clustermq_id`` on the queue (drained with the streaming reader), with its count."""
    df, _ = drain(spark, broker.reader_options(queue), work)
    return Counter(r.cid for r in df.select(F.col("headers")["clustermq_id"].alias("cid")).collect())


def _bodies(n: int) -> Iterator[pa.RecordBatch]:
    yield pa.record_batch([pa.array([f"m{i}" for i in range(n)])], names=["body"])


def test_direct_retried_task_adds_copies_on_classic_none_on_artemis(
    spark: SparkSession, broker, tmp_path: Path,
) -> None:
    """The same task (job, batch, partition) committed twice, as Spark's retry of a task whose
    first attempt had committed does: Artemis keeps one copy per id (the second attempt's
    COMMIT is refused for its duplicates and its messages re-sent outside the transaction,
    where each duplicate is dropped); Classic keeps both copies, same ids. Nothing is staged."""
    queue = new_queue("wdretry")
    count = 500
    options = WriteOptions.parse({**broker.reader_options(queue), "loadBalancingPolicy": "firstElement",
                                  "writeMode": "direct"})
    job = uuid.uuid4().hex
    node0 = names(broker)[0]
    copies = 1 if broker.flavor == "artemis" else 2
    for attempt in (0, 1):
        message = write_task(options, InputLayout(body="body", body_is_text=True),
                             TaskIdentity(job, 3, 0, attempt), _bodies(count), Direct())
        assert message.counts == {0: count}  # sent and committed by every attempt
    assert dict(broker.depths(queue)) == {n: (count * copies if n == node0 else 0) for n in names(broker)}
    assert not [q for qs in staging_queues(broker, queue).values() for q in qs if q.startswith(STAGING_PREFIX)]
    ids = _ids(spark, broker, queue, tmp_path)
    assert ids == Counter({f"{job}:3:0:{row}": copies for row in range(count)})


def test_direct_failed_job_keeps_the_committed_task_and_a_rerun_publishes_again(
    spark: SparkSession, broker, tmp_path: Path,
) -> None:
    """A 2-partition job whose second task fails once the first task's 300 rows are committed
    (its UDF waits for them on the queue, then raises on its first row): the job fails, its
    first task's 300 rows stay (ids ``<job>:0:0:0..299``), the failed task published nothing.
    Re-running the job publishes all 600 rows again under a new job id: 900 on the queue."""
    queue = new_queue("wdfail")
    rows, half = 600, 300
    opts = broker.reader_options(queue)

    @F.udf("string")
    def failing(i: int) -> str:
        if i == half:  # the first row of partition 1
            from depth_wait import wait_for_depth

            wait_for_depth(opts, half)
            raise ValueError("injected failure after the first task committed")
        return f"m{i}"

    df = spark.range(0, rows, 1, 2)
    with pytest.raises(Exception) as err:
        write(df.select(failing("id").alias("body")), broker, queue, writeMode="direct")
    assert "injected failure after the first task committed" in str(err.value)
    assert sum(d or 0 for d in broker.depths(queue).values()) == half
    write(df.select(F.concat(F.lit("m"), F.col("id").cast("string")).alias("body")), broker, queue,
          writeMode="direct")
    assert sum(d or 0 for d in broker.depths(queue).values()) == half + rows
    ids = _ids(spark, broker, queue, tmp_path)
    assert set(ids.values()) == {1}
    jobs = Counter(cid.split(":")[0] for cid in ids)
    assert sorted(jobs.values()) == [half, rows], jobs
    failed = next(job for job, n in jobs.items() if n == half)
    assert {cid for cid in ids if cid.startswith(failed)} == {f"{failed}:0:0:{r}" for r in range(half)}
    assert broker.wait_depth_zero(queue) == {n: 0 for n in names(broker)}


def test_write_mode_is_checked_when_options_are_parsed() -> None:
    from clustermq.errors import OptionError

    base = {"brokers": "127.0.0.1:61613", "queue": "q"}
    assert WriteOptions.parse(base).write_mode == "atomic"
    assert WriteOptions.parse({**base, "writeMode": "direct"}).direct
    with pytest.raises(OptionError, match="writeMode.*atomic.*direct"):
        WriteOptions.parse({**base, "writeMode": "fast"})


def test_direct_failed_stream_batch_keeps_its_committed_task_and_its_rerun_publishes_again(
    spark: SparkSession, broker, tmp_path: Path,
) -> None:
    """A streaming query in direct mode, one micro-batch per file of 1,000 rows, each batch in 2
    tasks (round robin). Batch 1's row 700 fails in both attempts of its task, once the other
    task has committed (the row waits for the queue to hold more than batch 0): the query stops
    with batch 1 failed, and what its committed task published stays (the queue's depth after
    the failed run, minus batch 0). The re-run of batch 1 from the checkpoint publishes all
    1,000 again with the same ids (query id, batch 1). Artemis drops the copies by
    ``_AMQ_DUPL_ID``: each id once. Classic keeps them: exactly what the failed run published,
    once more, each with the first copy's body. Nothing is staged."""
    queue = new_queue("wdstream")
    (tmp_path / "in").mkdir()
    for b in range(2):
        parquet_batch(spark, [(b * 1000 + i, f"s{i % 9}", b == 1 and i == 700) for i in range(1000)],
                      tmp_path, f"f{b}")
    (tmp_path / "fail").touch()
    log = tmp_path / "driver.log"
    mode = ["--write-mode", "direct", "--partitions", "2"]
    first = run_stream_driver(broker, queue, tmp_path, log, *mode, "--fail-after-depth", "1001")
    assert "injected failure at row 1700" in (first["error"] or ""), first
    query = first["query_id"]
    published = broker.settled_depths(queue)
    kept = sum(d or 0 for d in published.values()) - 1000  # batch 0 committed whole
    assert 0 < kept < 1000, published

    (tmp_path / "fail").unlink()
    assert run_stream_driver(broker, queue, tmp_path, log, *mode) == {"query_id": query, "error": None}
    assert not [q for qs in staging_queues(broker, queue).values() for q in qs if query in q]
    df, _ = drain(spark, broker.reader_options(queue), tmp_path / "read")
    got = df.select(F.col("headers")["clustermq_id"].alias("cid"),
                    F.col("body").cast("string").alias("body")).collect()
    ids = Counter(r["cid"] for r in got)
    by_id: dict[str, set[str]] = {}
    for r in got:
        by_id.setdefault(r["cid"], set()).add(r["body"])
    expected = {f"{query}:{b}:{p}:{i}" for b in range(2) for p in range(2)
                for i in range(sum(1 for cid in ids if cid.startswith(f"{query}:{b}:{p}:")))}
    assert set(ids) == expected and len(ids) == 2000, (len(ids), sorted(set(ids) ^ expected)[:10])
    assert all(len(bodies) == 1 for bodies in by_id.values())  # every copy the same body
    assert sorted(int(next(iter(b)).removeprefix("msg-")) for b in by_id.values()) == list(range(2000))
    copies = {cid: n - 1 for cid, n in ids.items() if n > 1}
    print(f"\n[{broker.flavor}] the failed batch kept {kept}; {sum(copies.values())} copies after "
          "the re-run")
    if broker.flavor == "artemis":
        assert not copies, f"copies the broker should have dropped by _AMQ_DUPL_ID: {len(copies)}"
    else:
        assert sum(copies.values()) == kept and all(n == 1 for n in copies.values()), (kept, copies)
        assert all(cid.startswith(f"{query}:1:") for cid in copies), sorted(copies)[:10]
    assert broker.wait_depth_zero(queue) == {n: 0 for n in names(broker)}
