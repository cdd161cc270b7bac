"""Test driver: stream Parquet files into a clustermq queue (Trigger.AvailableNow), one file per
micro-batch. Runs in its own process so the test can read the driver's log (stderr), where the
writer reports every batch it commits or aborts.

A row whose ``fail`` column is true raises in a UDF while the file named by ``--fail-flag``
exists: that batch's task fails part-way through its input. The last stdout line is JSON:
``{"query_id": ..., "error": null | "..."}``. Credentials come from ``CLUSTERMQ_USERNAME`` /
``CLUSTERMQ_PASSWORD``.
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
    parser.add_argument("--arrow-batch", type=int, default=100)
    args = parser.parse_args()

    from pyspark.sql import functions as F

    sys.path.insert(0, str(TESTS))  # the suite's session helper
    from sparksession import local_session

    spark = local_session(
        "clustermq-stream-writer-test",
        extra_conf={"spark.sql.execution.arrow.maxRecordsPerBatch": str(args.arrow_batch),
                    "spark.sql.shuffle.partitions": "2"},
    )
    flag = args.fail_flag

    # useArrow=False: on PySpark 4.2.0 an Arrow-optimised Python UDF in a *streaming* query hangs
    # its task (the UDF worker misreads the command: num_udfs 147), whatever the sink - measured
    # with the built-in noop sink too. See docs/design.md, "Spark facts".
    @F.udf("string", useArrow=False)
    def body(n: int, fail: bool) -> str:
        if fail and os.path.exists(flag):
            raise RuntimeError(f"injected failure at row {n}")
        return f"msg-{n}"

    source = (
        spark.readStream.schema("n long, grp string, fail boolean")
        .option("maxFilesPerTrigger", 1).parquet(args.input)
    )
    out = source.select(body("n", "fail").alias("body"), F.col("grp").alias("group_id"),
                        F.create_map(F.lit("n"), F.col("n").cast("string")).alias("headers"))
    query = (
        out.writeStream.format("clustermq")
        .option("brokers", args.brokers).option("queue", args.queue)
        .option("username", os.environ["CLUSTERMQ_USERNAME"])
        .option("password", os.environ["CLUSTERMQ_PASSWORD"])
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
