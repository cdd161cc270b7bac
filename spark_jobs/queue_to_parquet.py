"""Stream a cluster queue into a Parquet folder (Spark's file sink), checkpointed.

    python spark_jobs/queue_to_parquet.py --brokers H:P,H:P --queue orders \\
        --out /data/orders --checkpoint /data/orders/_checkpoint \\
        [--trigger availableNow | --trigger processingTime=5s] [--max-messages-per-trigger N]

Credentials come from the environment (CLUSTERMQ_USERNAME, CLUSTERMQ_PASSWORD), never from the
command line, where every user of the machine could read them. The file sink writes each batch
exactly once (its metadata log); a batch replayed after a crash may hold messages the broker
redelivered, flagged ``redelivered`` with their stable ``message_id``.
"""

from __future__ import annotations

import argparse
import os

from clustermq.pipelines.jobs import job_logging
from clustermq.pipelines.session import job_session


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--brokers", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--out", required=True, help="Parquet output folder")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--trigger", default="processingTime=1s",
                   help="availableNow or processingTime=<interval> (default processingTime=1s)")
    p.add_argument("--max-messages-per-trigger", type=int, default=10000)
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="any further clustermq reader option (repeatable)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    job_logging()
    spark = job_session("clustermq-queue-to-parquet")
    reader = (
        spark.readStream.format("clustermq")
        .option("brokers", args.brokers)
        .option("queue", args.queue)
        .option("maxMessagesPerTrigger", str(args.max_messages_per_trigger))
    )
    if os.environ.get("CLUSTERMQ_USERNAME"):
        reader = reader.option("username", os.environ["CLUSTERMQ_USERNAME"])
    if os.environ.get("CLUSTERMQ_PASSWORD"):
        reader = reader.option("password", os.environ["CLUSTERMQ_PASSWORD"])
    for item in args.option:
        key, _, value = item.partition("=")
        reader = reader.option(key, value)
    writer = (
        reader.load().writeStream.format("parquet")
        .option("path", args.out)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.trigger == "availableNow":
        writer = writer.trigger(availableNow=True)
    elif args.trigger.startswith("processingTime="):
        writer = writer.trigger(processingTime=args.trigger.split("=", 1)[1])
    else:
        raise SystemExit(f"--trigger: '{args.trigger}' is not availableNow or processingTime=<interval>")
    query = writer.start()
    print(f"query {query.id} started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
