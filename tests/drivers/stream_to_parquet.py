"""A streaming query in its own process, so a test can SIGKILL the driver.

Reads the queue with clustermq and appends to a Parquet file sink (exactly-once per batch
through its metadata log). The password comes from the environment, never from argv.
"""

from __future__ import annotations

import argparse
import os

from clustermq.session import local_session


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--brokers", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--trigger", choices=["availableNow", "processingTime"], default="processingTime")
    p.add_argument("--max-messages", type=int, default=500)
    args = p.parse_args()
    spark = local_session("clustermq-test-driver")
    df = (
        spark.readStream.format("clustermq")
        .option("brokers", args.brokers)
        .option("queue", args.queue)
        .option("username", os.environ["CLUSTERMQ_USERNAME"])
        .option("password", os.environ["CLUSTERMQ_PASSWORD"])
        .option("maxMessagesPerTrigger", str(args.max_messages))
        .option("replayTimeout", "20000")
        .load()
    )
    writer = (
        df.writeStream.format("parquet")
        .option("path", args.out)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.trigger == "availableNow":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    query = writer.start()
    print("query started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
