"""Export a queue's backlog from every node of the cluster into Delta or Parquet.

    python -m clustermq.jobs.export_backlog --brokers H:P,H:P --queue orders --out /lake/orders_backlog \\
        [--mode browse|drain] [--format delta|parquet] [--checkpoint DIR] \\
        [--max-messages-per-trigger N] [--option KEY=VALUE ...]

    spark-submit [--packages io.delta:delta-spark_4.2_2.13:4.4.0] spark_jobs/export_backlog.py ...

``--mode browse`` (default) writes a snapshot taken with the batch read: every node's queue is
browsed, nothing is consumed, the queues are left as they were (over STOMP on ActiveMQ Classic,
whose ``maxBrowsePageSize`` must cover the backlog, otherwise the job fails and says so; on
either broker over AMQP 1.0 with ``--option transport=amqp --option amqpBrokers=...``). The
output must not exist yet: a snapshot is never mixed into another.

``--mode drain`` empties the queue: a streaming read with ``Trigger.AvailableNow`` that reads
the backlog measured at start and acknowledges each micro-batch only after it is committed to
the output (``--checkpoint`` required; a crashed export resumes from it). Delta output goes
through the same de-duplicating sink as ``queue_to_delta`` (each ``message_id`` once); Parquet
output uses Spark's file sink (a redelivered message can appear twice, flagged
``redelivered``). ``--topic T --subscription S`` instead of ``--queue`` drains what a topic's
durable subscription holds (a topic keeps no backlog to browse).

``--format delta`` (default) needs Delta Lake on the class path; ``--format parquet`` does not.

Progress: the backlog per node at start, then messages exported against it. Credentials come
only from ``CLUSTERMQ_USERNAME`` / ``CLUSTERMQ_PASSWORD``. A failure prints one line
``export_backlog: error: <cause>`` and exits 2 (a bad setting) or 1 (at run time);
``CLUSTERMQ_LOG_LEVEL=DEBUG`` adds the traceback.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from clustermq.jobs.runner import job_parser, positive_int, run_spark_job, session_for_format
from clustermq.options import ReadOptions
from clustermq.pipelines.delta_sink import IdempotentDeltaWriter
from clustermq.pipelines.job_config import job_source, parse_key_values, reader_options
from clustermq.pipelines.streaming import StreamProgress, measure_backlog, run_until_done

NAME = "export_backlog"
MODES = ("browse", "drain")
FORMATS = ("delta", "parquet")


@dataclass
class ExportResult:
    mode: str
    backlog: int | None
    exported: int


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = job_parser(NAME, __doc__)
    p.add_argument("--out", required=True, help="output path (Delta table or Parquet folder)")
    p.add_argument("--mode", choices=MODES, default="browse")
    p.add_argument("--format", choices=FORMATS, default="delta")
    p.add_argument("--checkpoint", help="checkpoint folder (drain mode; required there)")
    p.add_argument("--max-messages-per-trigger", type=positive_int, default=10000,
                   help="drain mode: messages per micro-batch (default 10000)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="any further clustermq reader option (repeatable; not username/password)")
    args = p.parse_args(argv)
    if args.mode == "drain" and not args.checkpoint:
        p.error("--checkpoint is required with --mode drain (acknowledgement follows its commits)")
    args.reader_options = parse_key_values(args.option, "--option")
    args.source = job_source(args)
    return args


def _say(text: str) -> None:
    print(text, flush=True)


def run(spark: Any, args: argparse.Namespace) -> ExportResult:
    """The export itself, on a session (with Delta for ``--format delta``); the tests call
    this in-process."""
    options = reader_options(args.brokers, args.source, None, args.reader_options)
    backlog, table = measure_backlog(options)
    _say(f"backlog at start:\n{table}")
    if args.mode == "browse":
        exported = _browse(spark, args, {**options, "mode": "browse"})
    else:
        exported = _drain(spark, args, backlog)
    _, table = measure_backlog(options)
    _say(f"exported {exported} messages ({args.mode}, backlog at start {backlog}); "
         f"queue now:\n{table}")
    return ExportResult(args.mode, backlog, exported)


def node_count(options: dict[str, str]) -> int:
    """The nodes a browse reads, one task each: the reader's own parse of ``brokers`` (a
    ``masterslave:(a,b)`` pair is one node)."""
    return len(ReadOptions.parse(options).connection.nodes)


def _browse(spark: Any, args: argparse.Namespace, options: dict[str, str]) -> int:
    df = spark.read.format("clustermq").options(**options).load()
    nodes = node_count(options)
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_tasks, args=(spark, nodes, stop), daemon=True)
    watcher.start()
    try:
        df.write.format(args.format).mode("errorifexists").save(args.out)
    finally:
        stop.set()
        watcher.join(5)
    return spark.read.format(args.format).load(args.out).count()


def _watch_tasks(spark: Any, nodes: int, stop: threading.Event) -> None:
    """Browse progress: nodes (tasks) finished, from Spark's status tracker."""
    tracker = spark.sparkContext.statusTracker()
    last = -1
    while not stop.wait(1.0):
        done = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None and info.numTasks == nodes:
                done = max(done, info.numCompletedTasks)
        if done != last:
            _say(f"browse: {done} of {nodes} nodes done")
            last = done


def _drain(spark: Any, args: argparse.Namespace, backlog: int | None) -> int:
    options = reader_options(args.brokers, args.source, args.max_messages_per_trigger,
                             args.reader_options)
    stream = spark.readStream.format("clustermq").options(**options).load()
    sink = None
    if args.format == "delta":
        sink = IdempotentDeltaWriter(args.out)
        writer = stream.writeStream.foreachBatch(sink)
    else:
        writer = stream.writeStream.format("parquet").option("path", args.out)
    query = (writer.option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True).start())
    if sink is not None:
        sink.set_app_id(f"clustermq-export-backlog-{query.id}")
    progress = StreamProgress(query, backlog)
    started = time.monotonic()
    run_until_done(query, on_tick=progress)
    _say(f"drain finished in {time.monotonic() - started:.1f} s")
    return progress.done if sink is None else sink.totals.written


def main(argv: list[str] | None = None) -> int:
    """The job: flags (``argv``, default ``sys.argv[1:]``) to exit code; see the module docstring."""
    return run_spark_job(NAME, argv, parse_args,
                         lambda args: session_for_format("clustermq-export-backlog", args.format), run)


if __name__ == "__main__":
    sys.exit(main())
