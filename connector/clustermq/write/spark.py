"""``df.write`` / ``df.writeStream`` ``.format("clustermq")``: rows in, messages out.

Driver side, when Spark creates the writer: the input columns are checked
(:func:`~clustermq.write.layout.input_layout`) and the write mode is chosen
(:func:`~clustermq.write.modes.choose_mode`), before any task runs. Executor side: each task
turns its rows into messages and publishes them where the mode says
(:func:`~clustermq.write.task.write_task`). Driver side again: ``commit()`` and ``abort()`` finish
the way the tasks published (:mod:`clustermq.write.modes`). Why the default detour through
staging is in ``staging.py``: a Python writer is not told that its task failed.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from clustermq.errors import MoveError
from clustermq.options import WriteOptions
from clustermq.write.commit import report
from clustermq.write.layout import InputLayout
from clustermq.write.modes import WriteMode, choose_mode
from clustermq.write.task import ClusterMQCommitMessage, task_identity, winners, write_task


class ClusterMQBatchWriter(DataSourceArrowWriter):
    """``df.write.format("clustermq").mode("append").save()``.

    Created on the driver, pickled to every task and back to ``commit``/``abort``: the job id
    and the mode chosen here are shared by all of them.
    """

    def __init__(self, options: WriteOptions, layout: InputLayout) -> None:
        self.options = options
        self.layout = layout
        self.job_id = uuid.uuid4().hex
        #: ``NoNodeReachable`` now, before any task, when no node answers
        self.mode = choose_mode(options, unreachable_fails=True, expiring=layout.ttl is not None)

    def __repr__(self) -> str:
        return f"ClusterMQBatchWriter({self.options.connection.described}, job={self.job_id})"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ClusterMQCommitMessage:
        return write_task(self.options, self.layout, task_identity(self.job_id, False), iterator, self.mode)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.mode.commit(self.options, f"job {self.job_id}", self.job_id, winners(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.mode.abort(self.options, f"job {self.job_id}", self.job_id, winners(messages))


class ClusterMQStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("clustermq")``: one staged job per micro-batch.

    Spark creates this object on the driver anew for the tasks of every micro-batch (and pickles
    it to them), and again, in another process, for every ``commit``/``abort``: nothing is
    shared through it. So the node list (``discovery=cluster``: asked for here) and the mode
    chosen here hold for one batch's tasks, a node that joined is written to from the next
    batch on, and ``commit``/``abort`` finish by the node list and mode the tasks report in
    their commit messages (the query id, the staging queues' job id, comes the same way).
    """

    def __init__(self, options: WriteOptions, layout: InputLayout) -> None:
        self.options = discovered(options)
        self.layout = layout
        self.fallback_id = uuid.uuid4().hex
        self.mode = choose_mode(self.options, expiring=layout.ttl is not None)

    def __repr__(self) -> str:
        return f"ClusterMQStreamWriter({self.options.connection.described})"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ClusterMQCommitMessage:
        return write_task(self.options, self.layout, task_identity(self.fallback_id, True), iterator,
                          self.mode)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks = winners(messages)
        if not tasks:
            report(f"batch {batchId} committed 0 messages (no rows)")
            return
        job = tasks[0].job_id
        batch_mode(self.mode, tasks).commit(batch_options(self.options, tasks),
                                            f"query {job} batch {batchId}", job, tasks)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks = winners(messages)
        job = tasks[0].job_id if tasks else None
        batch_mode(self.mode, tasks).abort(batch_options(self.options, tasks),
                                           f"query {job or '(id unknown)'} batch {batchId}", job, tasks)


def discovered(options: WriteOptions) -> WriteOptions:
    """With ``discovery=cluster`` the write publishes to the nodes the cluster names now (asked
    on the driver, so every task and the commit of a job see the same list)."""
    if options.discovery != "cluster":
        return options
    from clustermq.broker.discovery import with_discovered

    return dataclasses.replace(options, connection=with_discovered(options.connection))


def batch_options(options: WriteOptions, tasks: Sequence[ClusterMQCommitMessage]) -> WriteOptions:
    """``options`` with the node list the batch's tasks published by (their staging queues are
    numbered by it); ``MoveError`` if the tasks disagree, which one pickled writer rules out."""
    lists = {m.nodes for m in tasks if m.nodes}
    if not lists:
        return options
    if len(lists) > 1:
        raise MoveError("the tasks of one batch published by different node lists: "
                        + " / ".join(",".join(n.name for n in nodes) for nodes in sorted(lists)))
    (nodes,) = lists
    return dataclasses.replace(options, connection=dataclasses.replace(options.connection, nodes=nodes))


def batch_mode(mode: WriteMode, tasks: Sequence[ClusterMQCommitMessage]) -> WriteMode:
    """The mode the batch's tasks published by (``mode``, this writer's, when none reported);
    ``MoveError`` if the tasks disagree, which one pickled writer rules out."""
    modes = {m.mode for m in tasks}
    if len(modes) > 1:
        raise MoveError("the tasks of one batch published in different write modes: "
                        + ", ".join(sorted(type(m).__name__ for m in modes)))
    return modes.pop() if modes else mode
