"""Test driver: a Spark Connect client that uses the clustermq source and sink.

Runs in its own process (a Connect session and the suite's classic session do not share one
interpreter well). Registers the source (a Connect client cannot rely on the server's
auto-registration being visible), then: batch write -> queue A; streaming read of A
(AvailableNow) -> Parquet; streaming write of Parquet files -> queue B; and, where the broker can
browse, a batch read of B. The last stdout line is JSON with the counts.
"""

from __future__ import annotations

import argparse
import json
import os

from pyspark.sql import SparkSession


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--remote", required=True)
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--queue-a", required=True)
    parser.add_argument("--queue-b", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--browse", action="store_true")
    args = parser.parse_args()

    from clustermq import ClusterMQDataSource

    spark = SparkSession.builder.remote(args.remote).getOrCreate()
    spark.dataSource.register(ClusterMQDataSource)
    login = {"brokers": args.brokers, "username": os.environ["CLUSTERMQ_USERNAME"],
             "password": os.environ["CLUSTERMQ_PASSWORD"]}
    result: dict[str, object] = {"client": type(spark).__module__}

    # batch sink
    (spark.range(args.rows).selectExpr("cast(id as string) as body")
     .write.format("clustermq").mode("append").options(**login, queue=args.queue_a).save())

    # streaming source
    out = f"{args.work}/read-a"
    query = (spark.readStream.format("clustermq").options(**login, queue=args.queue_a).load()
             .selectExpr("cast(body as string) as body", "node")
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", f"{args.work}/cp-read").trigger(availableNow=True).start())
    query.awaitTermination()
    bodies = [r.body for r in spark.read.parquet(out).select("body").collect()]
    result["read_a"] = sorted(int(b) for b in bodies)
    progress = query.lastProgress
    result["latest_offset"] = progress["sources"][0]["latestOffset"] if progress else None

    # streaming sink
    query = (spark.readStream.schema("body string").parquet(out)
             .writeStream.format("clustermq").options(**login, queue=args.queue_b)
             .option("checkpointLocation", f"{args.work}/cp-write").trigger(availableNow=True).start())
    query.awaitTermination()
    result["stream_write_error"] = str(query.exception()) if query.exception() else None

    # batch source
    if args.browse:
        snapshot = spark.read.format("clustermq").options(**login, queue=args.queue_b).load()
        result["browse_b"] = sorted(int(r.body) for r in snapshot.selectExpr("cast(body as string) as body").collect())
    print(json.dumps(result), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
