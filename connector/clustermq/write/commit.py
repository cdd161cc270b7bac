"""The driver's end of a write: a staged job's commit moves its messages into the queue, its
abort drops them, and every commit and abort says what happened in the driver's log.

Which of these a write does is its mode's (:mod:`clustermq.write.modes`). Why messages go
through staging at all is in :mod:`clustermq.write.staging`: a Python writer is not told that
its task failed.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Protocol

from clustermq.logs import apply_log_level
from clustermq.options import WriteOptions
from clustermq.write.staging import NodeMove, StagedTask

log = logging.getLogger("clustermq.writer")


class TaskReport(Protocol):
    """What the driver reads of a winning task attempt's commit message
    (:class:`~clustermq.write.task.ClusterMQCommitMessage`)."""

    task_tag: str
    rows: int
    #: node index -> messages the attempt committed there
    counts: dict[int, int]
    #: node name -> why the task could not use it
    unavailable: dict[str, str]


#: how a staged job's messages are moved: (options, job id, winners, queue, nodes to skip)
Move = Callable[[WriteOptions, str, Iterable[StagedTask], str, Collection[str]], list[NodeMove]]
#: how a staged job's leftovers are dropped on every node: (options, job id, queue)
Purge = Callable[[WriteOptions, str, str], list[NodeMove]]


def report(text: str, warning: bool = False) -> None:
    """Log on the driver. Spark's Python workers configure no logging (unless
    ``CLUSTERMQ_LOG_LEVEL`` is set, see logs.py): then write to stderr, which Spark forwards to
    the driver's log."""
    apply_log_level()
    log.log(logging.WARNING if warning else logging.INFO, text)
    if not log.hasHandlers():
        print(f"clustermq: {text}", file=sys.stderr, flush=True)


def commit_staged(options: WriteOptions, what: str, job_id: str,
                  tasks: Sequence[TaskReport], move: Move) -> list[NodeMove]:
    """Move the winning attempts' staged messages into the queue with ``move`` and report per
    node."""
    started = time.monotonic()
    unreachable = {name for m in tasks for name in m.unavailable}
    results = move(
        options, job_id, [StagedTask(m.task_tag, m.counts) for m in tasks], options.connection.queue,
        unreachable,
    )
    per_node = {r.node: r.moved for r in results}
    total = sum(per_node.values())
    rows = sum(m.rows for m in tasks)
    counts = ", ".join(f"{n.name}={per_node.get(n.name, 0)}" for n in options.connection.nodes)
    notes = [f"{r.node}: {note}" for r in results for note in r.notes]
    notes += [f"{r.node}: {r.dropped} stale staged messages dropped" for r in results if r.dropped]
    unavailable = sorted({f"{name} ({why})" for m in tasks for name, why in m.unavailable.items()})
    text = (f"{what} committed {total} messages ({rows} rows, {len(tasks)} tasks) to "
            f"{options.connection.described}: {counts}; moved from staging in "
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
#: writer's input early. The last late ones come about 5 s after abort() began (docs/design.md,
#: "The writer: stage, then publish on commit", "How").
ABORT_QUIET_S = 5.0
#: ... and stops after this long whatever still arrives (what comes later stays staged, invisible)
ABORT_LIMIT_S = 60.0
_ABORT_POLL_S = 0.5


def report_direct(options: WriteOptions, what: str, tasks: Sequence[TaskReport],
                  warning: bool = False) -> None:
    """Direct mode: the tasks committed straight into the queue; say how many went where."""
    per_node: dict[int, int] = {}
    for m in tasks:
        for index, count in m.counts.items():
            per_node[index] = per_node.get(index, 0) + count
    counts = ", ".join(f"{n.name}={per_node.get(i, 0)}" for i, n in enumerate(options.connection.nodes))
    text = (f"{what}: {sum(per_node.values())} messages ({sum(m.rows for m in tasks)} rows, "
            f"{len(tasks)} tasks) published directly to {options.connection.described}: {counts}")
    if warning:
        text += ("; writeMode=direct keeps them (and whatever tasks still finishing commit); "
                 "a re-run publishes its rows again")
    report(text, warning)


def abort_staged(options: WriteOptions, what: str, job_id: str | None, purge: Purge) -> None:
    """Drop what the job staged with ``purge`` (``job_id`` ``None``: no task reported, nothing
    to find), also what tasks still finishing stage during the next ``ABORT_QUIET_S``
    seconds."""
    queue = options.connection.queue
    if job_id is None:
        report(f"{what} aborted: nothing was published to {options.connection.described}; no task reported staged "
               "messages (what a failed task may have staged is dropped by the query's next "
               "committed batch)", warning=True)
        return
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
    text = f"{what} aborted: nothing was published to {options.connection.described}; {dropped} staged messages dropped"
    if late:
        text += (f" ({late} of them staged by tasks still finishing, the last "
                 f"{last_found - started:.1f} s after the abort began)")
    if problems:
        text += "; " + "; ".join(f"{node}: {error}" for node, error in problems.items())
    report(text, warning=True)
