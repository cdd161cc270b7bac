"""Stream a cluster queue into a Parquet folder (Spark's file sink), checkpointed.

    python -m clustermq.jobs.queue_to_parquet --brokers H:P,H:P (--queue orders | --topic T --subscription S) \\
        --out /data/orders --checkpoint /data/orders/_checkpoint \\
        [--trigger availableNow | --trigger processingTime=1s] [--max-messages-per-trigger N] \\
        [--option KEY=VALUE ...]

    spark-submit spark_jobs/queue_to_parquet.py ...

Credentials come from the environment (CLUSTERMQ_USERNAME, CLUSTERMQ_PASSWORD), never from the
command line, where every user of the machine could read them: ``--option username=...`` and
``--option password=...`` are refused. The file sink writes each batch exactly once (its
metadata log); a batch replayed after a crash may hold messages the broker redelivered, flagged
``redelivered`` with their stable ``message_id``. SIGTERM or SIGINT stop the query cleanly.

A failure prints one line ``queue_to_parquet: error: <cause>`` and exits 2 (a bad setting) or
1 (at run time); ``CLUSTERMQ_LOG_LEVEL=DEBUG`` adds the traceback.
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession

from clustermq.jobs.runner import job_parser, positive_int, run_spark_job
from clustermq.pipelines.job_config import job_source, parse_key_values, reader_options
from clustermq.pipelines.spark_session import job_session
from clustermq.pipelines.streaming import apply_trigger, check_trigger, run_until_done

NAME = "queue_to_parquet"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = job_parser(NAME, __doc__)
    p.add_argument("--out", required=True, help="Parquet output folder")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--trigger", default="processingTime=1s",
                   help="availableNow or processingTime=<interval> (default processingTime=1s)")
    p.add_argument("--max-messages-per-trigger", type=positive_int, default=10000,
                   help="messages per micro-batch over all nodes (default 10000)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="any further clustermq reader option (repeatable; not username/password)")
    args = p.parse_args(argv)
    check_trigger(args.trigger)
    args.reader_options = parse_key_values(args.option, "--option")
    args.source = job_source(args)
    return args


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    """Run the query until it ends (AvailableNow) or is stopped (a signal); return 0."""
    options = reader_options(args.brokers, args.source, args.max_messages_per_trigger,
                             args.reader_options)
    writer = (
        spark.readStream.format("clustermq").options(**options).load()
        .writeStream.format("parquet")
        .option("path", args.out)
        .option("checkpointLocation", args.checkpoint)
    )
    query = apply_trigger(writer, args.trigger).start()
    print(f"query {query.id} started", flush=True)
    run_until_done(query)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The job: flags (``argv``, default ``sys.argv[1:]``) to exit code; see the module docstring."""

    return run_spark_job(NAME, argv, parse_args, lambda _: job_session("clustermq-queue-to-parquet"), run)

if __name__ == "__main__":
    sys.exit(main())
