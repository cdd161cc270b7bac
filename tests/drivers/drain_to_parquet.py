"""Test driver: drain a queue into Parquet with Trigger.AvailableNow, as a user's own script.

It imports nothing of clustermq: ``format("clustermq")`` must resolve through Spark's
auto-registration of the installed or shipped package. The master comes from
the launcher (spark-submit) or defaults to local; the last stdout line is JSON
``{"rows": N, "app_id": ...}``. Credentials come from ``CLUSTERMQ_USERNAME`` /
``CLUSTERMQ_PASSWORD``.
"""

from __future__ import annotations

import argparse
import json
import os

from pyspark.sql import SparkSession


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args()

    builder = SparkSession.builder.appName("clustermq-user-drain")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # plain python: a local master
        builder = builder.master("local[2]")
    spark = builder.getOrCreate()
    df = (spark.readStream.format("clustermq")
          .option("brokers", args.brokers).option("queue", args.queue)
          .option("username", os.environ["CLUSTERMQ_USERNAME"])
          .option("password", os.environ["CLUSTERMQ_PASSWORD"])
          .load())
    query = (df.writeStream.format("parquet").option("path", args.out)
             .option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    rows = spark.read.parquet(args.out).count()
    print(json.dumps({"rows": rows, "app_id": spark.sparkContext.applicationId}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
