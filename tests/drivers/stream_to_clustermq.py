"""Test driver: stream Parquet files into a clustermq queue (Trigger.AvailableNow), one file per
micro-batch. Runs in its own process so the test can read the driver's log (stderr), where the
writer reports every batch it commits or aborts, and so the test can SIGKILL it.

A row whose ``fail`` column is true raises in a UDF while the file named by ``--fail-flag``
exists: that batch's task fails part-way through its input, in every attempt.

``--retried-write-rows N`` first writes N rows (3 partitions, ``n`` from
``--retried-write-first-n``, bodies ``msg-<n>`` padded with ``--retried-write-pad`` dots) into
the same queue as a *batch* job, whose task for partition 1 fails once after staging part of its
rows: an Arrow UDF raises on that partition's row 500 from its end in the attempt that manages
to delete ``--fail-once-flag``. In a batch write such a failure, once the writer has received a
few Arrow batches of over 64 KiB (Spark's buffer), ends the writer's input early instead of
raising there (clustermq.write.staging; earlier, it raises ArrowInvalid in the writer, which
stages nothing), so the failed attempt commits what it got into staging; Spark then retries the
task (``--max-failures`` 2: ``local[2,2]``), and the retry succeeds.

``--write-mode`` is the writer's ``writeMode`` (default ``atomic``); ``--partitions N``
repartitions each micro-batch (round robin) into N tasks; ``--fail-after-depth D`` makes the
failing row wait until the queue holds D messages first (so a sibling task has committed).

The last stdout line is JSON: ``{"query_id": ..., "error": null | "..."}``. Credentials come
from ``CLUSTERMQ_USERNAME`` / ``CLUSTERMQ_PASSWORD``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--fail-flag", required=True)
    parser.add_argument("--fail-once-flag")
    parser.add_argument("--retried-write-rows", type=int, default=0)
    parser.add_argument("--retried-write-first-n", type=int, default=0)
    parser.add_argument("--retried-write-pad", type=int, default=200)
    parser.add_argument("--max-failures", type=int, default=1)
    parser.add_argument("--arrow-batch", type=int, default=100)
    parser.add_argument("--write-mode", default="atomic")
    parser.add_argument("--partitions", type=int, default=0)
    parser.add_argument("--fail-after-depth", type=int, default=0)
    args = parser.parse_args()

    from pyspark.sql import functions as F

    sys.path.insert(0, str(TESTS))  # the suite's session helper and depth poll
    from depth_wait import wait_for_depth
    from sparksession import local_session

    spark = local_session(
        "clustermq-stream-writer-test",
        extra_conf={"spark.sql.execution.arrow.maxRecordsPerBatch": str(args.arrow_batch),
                    "spark.sql.shuffle.partitions": "2",
                    # local mode retries a failed task only when the master says so
                    "spark.master": f"local[2,{args.max_failures}]"},
    )
    options = {"brokers": args.brokers, "queue": args.queue,
               "username": os.environ["CLUSTERMQ_USERNAME"],
               "password": os.environ["CLUSTERMQ_PASSWORD"], "writeMode": args.write_mode}

    if args.retried_write_rows:
        once, rows, first = args.fail_once_flag, args.retried_write_rows, args.retried_write_first_n
        pad = "." * args.retried_write_pad
        fail_at = first + 2 * (rows // 3) - 500  # partition 1's row 500 from its end

        @F.udf("string")  # Arrow-optimised (the default): see the module docstring
        def once_body(n: int) -> str:
            if n == fail_at and once:
                try:
                    os.unlink(once)  # only one attempt can
                except FileNotFoundError:
                    pass
                else:
                    raise RuntimeError(f"injected failure once at row {n}")
            return f"msg-{n}{pad}"

        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
        (spark.range(first, first + rows, 1, 3)
         .select(once_body("id").alias("body"),
                 F.create_map(F.lit("n"), F.col("id").cast("string")).alias("headers"))
         .write.format("clustermq").mode("append").options(**options).save())
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.arrow_batch))

    flag = args.fail_flag

    # useArrow=False: on PySpark 4.2.0 an Arrow-optimised Python UDF in a *streaming* query hangs
    # its task (the UDF worker misreads the command: num_udfs 147), whatever the sink - measured
    # with the built-in noop sink too. See docs/design.md, "Spark facts".
    @F.udf("string", useArrow=False)
    def body(n: int, fail: bool) -> str:
        if fail and os.path.exists(flag):
            wait_for_depth(options, args.fail_after_depth)
            raise RuntimeError(f"injected failure at row {n}")
        return f"msg-{n}"

    source = (
        spark.readStream.schema("n long, grp string, fail boolean")
        .option("maxFilesPerTrigger", 1).parquet(args.input)
    )
    if args.partitions:  # before the UDF, so that it runs in the writing tasks
        source = source.repartition(args.partitions)
    out = source.select(body("n", "fail").alias("body"), F.col("grp").alias("group_id"),
                        F.create_map(F.lit("n"), F.col("n").cast("string")).alias("headers"))
    query = (
        out.writeStream.format("clustermq").options(**options)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    error = None
    try:
        query.awaitTermination()
    except Exception as exc:
        error = str(exc)[:2000]
    print(json.dumps({"query_id": str(query.id), "error": error}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
