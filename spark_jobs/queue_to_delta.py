"""Stream a cluster queue into a Delta table, checkpointed; every message_id lands once.

    python spark_jobs/queue_to_delta.py --brokers H:P,H:P --queue orders \\
        --table /lake/orders --checkpoint /lake/_checkpoints/orders \\
        [--trigger availableNow | --trigger processingTime=5s] [--max-messages-per-trigger N] \\
        [--dedupe redelivered|all] [--id-header NAME] [--parse json --schema DDL] \\
        [--option KEY=VALUE ...] [--config conf/queue_to_delta.conf]

Columns: every reader column plus ``ingest_time`` (when the batch was written) and
``batch_id`` (the micro-batch). With ``--parse json --schema 'order long, customer string'``
each body is also parsed into those columns, plus ``_corrupt``: a body that does not parse
(not UTF-8, not a JSON object, a value of the wrong type) is kept, never dropped, with its
parsed columns null and its text in ``_corrupt`` (the exact bytes stay in ``body``); every
batch line counts them ("N unparsable"). Each batch is appended with Delta's txnAppId (the query id)
and txnVersion (the batch id), and rows are de-duplicated by ``message_id``: see
``clustermq.pipelines.delta_sink`` and the README for the guarantee and its limits.

Settings: flags win over the ``[queue_to_delta]`` section of ``--config``; further reader
options go in its ``[reader_options]`` section or in ``--option``. Credentials come only from
``CLUSTERMQ_USERNAME`` / ``CLUSTERMQ_PASSWORD`` in the environment.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from clustermq.errors import DeltaJarsMissing, JobConfigError
from clustermq.pipelines.body_parse import body_parse_from_flags
from clustermq.pipelines.delta_session import delta_session
from clustermq.pipelines.delta_sink import DEDUPE_SCOPES, BatchReport
from clustermq.pipelines.jobs import (
    job_logging,
    load_config,
    merge_settings,
    parse_key_values,
    reader_options,
)
from clustermq.pipelines.queue_to_delta import start_queue_to_delta
from clustermq.pipelines.streaming import LagLines, check_trigger, run_until_done

SECTION = "queue_to_delta"
DEFAULTS = {
    "trigger": "processingTime=5s",
    "max_messages_per_trigger": "10000",
    "dedupe": "redelivered",
    "id_header": None,
    "parse": None,
    "schema": None,
}
REQUIRED = ("brokers", "queue", "table", "checkpoint")

# Fault injection for the killed-driver test: SIGKILL this job's process group (the driver
# and its Spark JVM) right after the Delta commit of the given batch, before Spark writes that
# batch to its commit log -- the exact window the txnVersion idempotence exists for.
FAULT_ENV = "CLUSTERMQ_FAULT_KILL_AFTER_BATCH"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="INI file with a [queue_to_delta] section (see conf/queue_to_delta.conf)")
    p.add_argument("--brokers")
    p.add_argument("--queue")
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
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="any further clustermq reader option (repeatable)")
    args = p.parse_args(argv)
    settings, config_reader = load_config(args.config, SECTION)
    merged = merge_settings(args, settings, DEFAULTS, REQUIRED)
    merged.max_messages_per_trigger = int(merged.max_messages_per_trigger)
    check_trigger(merged.trigger)
    if merged.dedupe not in DEDUPE_SCOPES:
        raise JobConfigError(f"dedupe: '{merged.dedupe}' is not one of {', '.join(DEDUPE_SCOPES)}")
    merged.reader_options = {**config_reader, **parse_key_values(args.option, "--option")}
    merged.body_parse = body_parse_from_flags(merged.parse, merged.schema)
    return merged


class _KillAfterBatch:
    """Fault injection for the tests (``CLUSTERMQ_FAULT_KILL_AFTER_BATCH=N``): SIGKILL the job's
    process group right after the Delta commit of its N-th batch that held rows (from 0). Empty
    batches do not count: Spark plans an empty batch 0 when no message was dispatched yet at the
    start (a Classic queue waits ``timeBeforeDispatchStarts`` after its first consumer)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.with_rows = -1
        self.rows_in = 0

    def on_report(self, report: BatchReport) -> None:
        print_report(report)
        self.rows_in = report.rows_in

    def after_commit(self, batch_id: int) -> None:
        rows_in, self.rows_in = self.rows_in, 0
        if not rows_in:
            return
        self.with_rows += 1
        if self.with_rows == self.target:
            print(f"fault injection: SIGKILL after the Delta commit of batch {batch_id}", flush=True)
            os.killpg(os.getpid(), signal.SIGKILL)


def _fault_hook() -> _KillAfterBatch | None:
    target = os.environ.get(FAULT_ENV)
    if not target:
        return None
    if os.getpgid(0) != os.getpid():
        raise JobConfigError(f"{FAULT_ENV} needs the job to lead its own process group")
    return _KillAfterBatch(int(target))


def print_report(report: BatchReport) -> None:
    print(report.line(), flush=True)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        job_logging()
        spark = delta_session("clustermq-queue-to-delta")
    except (JobConfigError, DeltaJarsMissing) as exc:
        print(f"queue_to_delta: error: {exc}", file=sys.stderr)
        return 2
    options = reader_options(args.brokers, args.queue, args.max_messages_per_trigger,
                             args.reader_options)
    try:
        fault = _fault_hook()
        query, sink = start_queue_to_delta(spark, options, args.table, args.checkpoint,
                                           args.trigger, args.dedupe,
                                           on_report=fault.on_report if fault else print_report,
                                           after_commit=fault.after_commit if fault else None,
                                           id_header=args.id_header,
                                           parse=args.body_parse)
    except JobConfigError as exc:
        print(f"queue_to_delta: error: {exc}", file=sys.stderr)
        spark.stop()
        return 2
    print(f"query {query.id} started: queue {args.queue} -> {args.table}", flush=True)
    try:
        run_until_done(query, on_tick=LagLines(query))
    finally:
        totals = sink.totals
        print(f"done: {totals.batches} batches, {totals.rows_in} rows read, "
              f"{totals.duplicates_dropped} duplicates dropped, {totals.written} rows written"
              + (f", {totals.corrupt} unparsable (kept in _corrupt)" if args.body_parse else ""),
              flush=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
