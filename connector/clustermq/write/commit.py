"""The driver's end of a write: commit moves a job's staged messages into the queue, abort
drops them, and both say what happened in the driver's log.

Why messages go through staging at all is in :mod:`clustermq.write.staging`: a Python writer is
not told that its task failed.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence

from pyspark.sql.datasource import WriterCommitMessage

from clustermq.logs import apply_log_level
from clustermq.options import WriteOptions
from clustermq.write.broker_move import move_attempts, purge_attempts
from clustermq.write.staging import NodeMove, StagedTask, move_job, purge_job
from clustermq.write.task import ClusterMQCommitMessage

log = logging.getLogger("clustermq.writer")


def report(text: str, warning: bool = False) -> None:
    """Log on the driver. Spark's Python workers configure no logging (unless
    ``CLUSTERMQ_LOG_LEVEL`` is set, see logs.py): then write to stderr, which Spark forwards to
    the driver's log."""
    apply_log_level()
    log.log(logging.WARNING if warning else logging.INFO, text)
    if not log.hasHandlers():
        print(f"clustermq: {text}", file=sys.stderr, flush=True)


def winners(messages: Sequence[WriterCommitMessage | None]) -> list[ClusterMQCommitMessage]:
    """The commit messages of the task attempts Spark kept (``None`` for tasks with no rows)."""
    return [m for m in messages if isinstance(m, ClusterMQCommitMessage)]


def commit_job(options: WriteOptions, what: str, job_id: str,
               messages: Sequence[WriterCommitMessage | None]) -> list[NodeMove]:
    """Move the winning attempts' staged messages into the queue and report per node."""
    tasks = winners(messages)
    if options.direct:
        report_direct(options, f"{what} committed", tasks)
        return []
    started = time.monotonic()
    unreachable = {name for m in tasks for name in m.unavailable}
    move = move_attempts if any(m.attempt_staging for m in tasks) else move_job
    results = move(
        options, job_id, [StagedTask(m.task_tag, m.counts) for m in tasks], options.connection.queue,
        skip=unreachable,
    )
    per_node = {r.node: r.moved for r in results}
    total = sum(per_node.values())
    rows = sum(m.rows for m in tasks)
    counts = ", ".join(f"{n.name}={per_node.get(n.name, 0)}" for n in options.connection.nodes)
    notes = [f"{r.node}: {note}" for r in results for note in r.notes]
    notes += [f"{r.node}: {r.dropped} stale staged messages dropped" for r in results if r.dropped]
    unavailable = sorted({f"{name} ({why})" for m in tasks for name, why in m.unavailable.items()})
    text = (f"{what} committed {total} messages ({rows} rows, {len(tasks)} tasks) to queue "
            f"'{options.connection.queue}': {counts}; moved from staging in "
            f"{time.monotonic() - started:.1f} s")
    in_broker = sum(r.in_broker for r in results)
    if in_broker:
        text += f" ({in_broker} moved inside the broker)"
    if unavailable:
        text += "; nodes unavailable to tasks: " + ", ".join(unavailable)
    if notes:
        text += "; " + "; ".join(notes)
    report(text)
    return results


#: abort() keeps dropping what the job's tasks stage until none came for this long. Spark calls
#: abort() as soon as the job failed, while tasks it is cancelling may still be committing into
#: staging: a sibling's whole partition, or the failed task's own rows when Spark ended its
#: writer's input early (measured: without this loop 10,000 of 16,000 staged messages stayed,
#: Artemis; with it, the last late ones came 5.1 s (Artemis) and 4.9 s (Classic) after abort()
#: began, up to 3.9 s after the previous find).
ABORT_QUIET_S = 5.0
#: ... and stops after this long whatever still arrives (what comes later stays staged, invisible)
ABORT_LIMIT_S = 60.0
_ABORT_POLL_S = 0.5


def report_direct(options: WriteOptions, what: str, tasks: Sequence[ClusterMQCommitMessage],
                  warning: bool = False) -> None:
    """Direct mode: the tasks committed straight into the queue; say how many went where."""
    per_node: dict[int, int] = {}
    for m in tasks:
        for index, count in m.counts.items():
            per_node[index] = per_node.get(index, 0) + count
    counts = ", ".join(f"{n.name}={per_node.get(i, 0)}" for i, n in enumerate(options.connection.nodes))
    text = (f"{what}: {sum(per_node.values())} messages ({sum(m.rows for m in tasks)} rows, "
            f"{len(tasks)} tasks) published directly to queue '{options.connection.queue}': {counts}")
    if warning:
        text += ("; writeMode=direct keeps them (and whatever tasks still finishing commit); "
                 "a re-run publishes its rows again")
    report(text, warning)


def abort_job(options: WriteOptions, what: str, job_id: str | None,
              messages: Sequence[WriterCommitMessage | None] = (), attempt_staging: bool = False) -> None:
    """Drop what the job staged (``job_id`` ``None``: no task reported, nothing to find), also
    what tasks still finishing stage during the next ``ABORT_QUIET_S`` seconds; with
    ``attempt_staging`` (or a task that says so) every attempt's own staging queue. Direct
    mode: nothing was staged; say what the finished tasks left in the queue."""
    queue = options.connection.queue
    if options.direct:
        report_direct(options, f"{what} aborted", winners(messages), warning=True)
        return
    if job_id is None:
        report(f"{what} aborted: nothing was published to '{queue}'; no task reported staged "
               "messages (what a failed task may have staged is dropped by the query's next "
               "committed batch)", warning=True)
        return
    purge = purge_attempts if attempt_staging or any(
        m.attempt_staging for m in winners(messages)) else purge_job
    started = time.monotonic()
    last_found = started
    rounds: list[int] = []  # messages dropped per purge round
    problems: dict[str, str] = {}
    while True:
        results = purge(options, job_id, queue)
        rounds.append(sum(r.dropped for r in results))
        problems.update({r.node: r.error for r in results if r.error})
        now = time.monotonic()
        if rounds[-1]:
            last_found = now
        if now - last_found >= ABORT_QUIET_S or now - started >= ABORT_LIMIT_S:
            break
        time.sleep(_ABORT_POLL_S)
    dropped, late = sum(rounds), sum(rounds[1:])
    text = f"{what} aborted: nothing was published to '{queue}'; {dropped} staged messages dropped"
    if late:
        text += (f" ({late} of them staged by tasks still finishing, the last "
                 f"{last_found - started:.1f} s after the abort began)")
    if problems:
        text += "; " + "; ".join(f"{node}: {error}" for node, error in problems.items())
    report(text, warning=True)
