"""Stream a cluster queue into a Delta table, checkpointed; every message_id lands once.

    python -m clustermq.jobs.queue_to_delta --brokers H:P,H:P (--queue orders | --topic T --subscription S) \\
        --table /lake/orders --checkpoint /lake/_checkpoints/orders \\
        [--trigger availableNow | --trigger processingTime=5s] [--max-messages-per-trigger N] \\
        [--dedupe redelivered|all] [--id-header NAME] [--parse json --schema DDL] \\
        [--park-queue NAME] [--option KEY=VALUE ...] [--config conf/queue_to_delta.conf]

    spark-submit --packages io.delta:delta-spark_4.2_2.13:4.4.0 spark_jobs/queue_to_delta.py ...

Columns: every reader column plus ``ingest_time`` (when the batch was written) and
``batch_id`` (the micro-batch). With ``--parse json --schema 'order long, customer string'``
each body is also parsed into those columns, plus ``_corrupt``: a body that does not parse
(not UTF-8, not a JSON object, a value of the wrong type) is kept, never dropped, with its
parsed columns null and its text in ``_corrupt`` (the exact bytes stay in ``body``); every
batch line counts them ("N unparsable"). With ``--park-queue NAME`` the rows the table would
refuse (a CHECK constraint broken, a NOT NULL column empty, and with ``--parse`` a body that
does not parse) are published to queue NAME instead of failing the batch on every run
(``clustermq.pipelines.park``). Each batch is appended with Delta's txnAppId (the query id)
and txnVersion (the batch id), and rows are de-duplicated by ``message_id``: see
``clustermq.pipelines.delta_sink`` and the README for the guarantee and its limits.

Settings: flags win over the ``[queue_to_delta]`` section of ``--config``; further reader
options go in its ``[reader_options]`` section or in ``--option``. Credentials come only from
``CLUSTERMQ_USERNAME`` / ``CLUSTERMQ_PASSWORD`` in the environment.

A failure prints one line ``queue_to_delta: error: <cause>`` and exits 2 (a bad setting) or 1
(at run time); ``CLUSTERMQ_LOG_LEVEL=DEBUG`` adds the traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from pyspark.sql import SparkSession

from clustermq.errors import JobConfigError
from clustermq.jobs.runner import job_parser, run_spark_job
from clustermq.pipelines.body_parse import body_parse_from_flags
from clustermq.pipelines.delta_session import delta_session
from clustermq.pipelines.delta_sink import DEDUPE_SCOPES, BatchReport
from clustermq.pipelines.delta_stream import start_queue_to_delta
from clustermq.pipelines.job_config import (
    job_source,
    load_config,
    merge_settings,
    parse_key_values,
    positive_int_setting,
    reader_options,
    setting_source,
    source_label,
)
from clustermq.pipelines.park import Parking
from clustermq.pipelines.streaming import LagLines, check_trigger, run_until_done

NAME = "queue_to_delta"
SECTION = "queue_to_delta"
DEFAULTS = {
    "trigger": "processingTime=5s",
    "max_messages_per_trigger": "10000",
    "dedupe": "redelivered",
    "id_header": None,
    "parse": None,
    "schema": None,
    "park_queue": None,
    "queue": None,  # or topic: job_source checks that one is given
    "topic": None,
    "subscription": None,
}
REQUIRED = ("brokers", "table", "checkpoint")

#: Called with each batch's report after the job printed it.
ReportHook = Callable[[BatchReport], None]
#: Called with the batch id right after the batch's Delta commit, before Spark's commit log.
CommitHook = Callable[[int], None]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = job_parser(NAME, __doc__, cluster_required=False)  # or from --config
    p.add_argument("--config", help="INI file with a [queue_to_delta] section (see conf/queue_to_delta.conf)")
    p.add_argument("--table", help="path or URI of the Delta table (created on the first batch)")
    p.add_argument("--checkpoint", help="checkpoint folder of the streaming query")
    p.add_argument("--trigger", help="availableNow or processingTime=<interval> (default processingTime=5s)")
    p.add_argument("--max-messages-per-trigger", help="messages per micro-batch over all nodes (default 10000)")
    p.add_argument("--dedupe", choices=DEDUPE_SCOPES,
                   help="anti-join against the table only rows flagged redelivered (default), "
                        "or every row (covers brokers that lose the redelivered flag on restart)")
    p.add_argument("--id-header", metavar="NAME",
                   help="de-duplicate by this header (a producer-assigned id, e.g. clustermq_id) "
                        "where present, else by message_id; needed on Artemis, which gives a "
                        "message moved to another node a new message-id")
    p.add_argument("--parse", choices=("json",),
                   help="parse every body as JSON into the columns of --schema; a body that "
                        "does not parse is kept with its text in column _corrupt (never dropped) "
                        "and counted in the batch line")
    p.add_argument("--schema", metavar="DDL",
                   help="the parsed columns as a Spark DDL string, e.g. 'order long, customer "
                        "string' (with --parse)")
    p.add_argument("--park-queue", metavar="NAME",
                   help="publish the rows the table would refuse (a broken CHECK constraint, an "
                        "empty NOT NULL column, with --parse a body that does not parse) to this "
                        "queue on the same cluster, instead of failing the batch on every run")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="any further clustermq reader option (repeatable; not username/password)")
    args = p.parse_args(argv)
    settings, config_reader = load_config(args.config, SECTION)
    merged = merge_settings(args, settings, DEFAULTS, REQUIRED)
    merged.max_messages_per_trigger = positive_int_setting(
        merged.max_messages_per_trigger, "max_messages_per_trigger", args, args.config)
    check_trigger(merged.trigger, setting_source("trigger", args, args.config))
    if merged.dedupe not in DEDUPE_SCOPES:
        raise JobConfigError(f"{setting_source('dedupe', args, args.config)}: '{merged.dedupe}' "
                             f"is not one of {', '.join(DEDUPE_SCOPES)}")
    merged.source = job_source(merged)
    merged.reader_options = {**config_reader, **parse_key_values(args.option, "--option")}
    merged.body_parse = body_parse_from_flags(merged.parse, merged.schema)
    merged.park = None
    if merged.park_queue:  # checked here: a bad queue name fails before Spark starts
        merged.park = Parking.for_job(merged.park_queue, reader_options(
            merged.brokers, merged.source, None, merged.reader_options))
    return merged


def print_report(report: BatchReport) -> None:
    print(report.line(), flush=True)


def run(
    spark: SparkSession,
    args: argparse.Namespace,
    on_report: ReportHook | None = None,
    after_commit: CommitHook | None = None,
) -> int:
    """Run the query until it ends (AvailableNow) or is stopped (a signal); return 0.

    ``on_report`` and ``after_commit`` let an embedding program watch each batch (the job
    prints every batch's line itself).
    """
    # Built here and not kept on ``args``: they carry the password from the environment, and
    # ``args`` is a plain Namespace whose repr() would show it.
    options = reader_options(args.brokers, args.source, args.max_messages_per_trigger,
                             args.reader_options)

    def report(batch: BatchReport) -> None:
        print_report(batch)
        if on_report is not None:
            on_report(batch)

    query, sink = start_queue_to_delta(spark, options, args.table, args.checkpoint,
                                       args.trigger, args.dedupe, on_report=report,
                                       after_commit=after_commit, id_header=args.id_header,
                                       parse=args.body_parse, park=args.park)
    print(f"query {query.id} started: {source_label(args.source)} -> {args.table}", flush=True)
    try:
        run_until_done(query, on_tick=LagLines(query))
    finally:
        totals = sink.totals
        print(f"done: {totals.batches} batches, {totals.rows_in} rows read, "
              f"{totals.duplicates_dropped} duplicates dropped, {totals.written} rows written"
              + (f", {totals.corrupt} unparsable (kept in _corrupt)" if args.body_parse and not args.park else "")
              + (f", {totals.parked} parked in {args.park.queue}" if args.park else ""),
              flush=True)
    return 0


def main(
    argv: list[str] | None = None,
    *,
    on_report: ReportHook | None = None,
    after_commit: CommitHook | None = None,
) -> int:
    """The job: flags (``argv``, default ``sys.argv[1:]``) to exit code; see the module docstring."""
    return run_spark_job(NAME, argv, parse_args, lambda _: delta_session("clustermq-queue-to-delta"),
                         lambda spark, args: run(spark, args, on_report, after_commit))


if __name__ == "__main__":
    sys.exit(main())
