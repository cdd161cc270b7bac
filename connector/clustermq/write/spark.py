"""``df.write`` / ``df.writeStream`` ``.format("clustermq")``: rows in, messages out.

Driver side: the input columns are checked once, before any task runs
(:func:`~clustermq.write.layout.input_layout`). Executor side: each task turns its rows into
messages and publishes them into the job's staging queues (:func:`~clustermq.write.task.write_task`).
Driver side again: ``commit()`` moves the staged messages into the queue and ``abort()`` drops
them (:mod:`clustermq.write.commit`). Why the detour through staging is in ``staging.py``: a
Python writer is not told that its task failed.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from clustermq.errors import MoveError
from clustermq.options import WriteOptions
from clustermq.write.broker_move import probe_attempt_staging
from clustermq.write.commit import abort_job, commit_job, report, winners
from clustermq.write.layout import InputLayout
from clustermq.write.task import ClusterMQCommitMessage, task_identity, write_task


class ClusterMQBatchWriter(DataSourceArrowWriter):
    """``df.write.format("clustermq").mode("append").save()``.

    Created on the driver, pickled to every task and back to ``commit``/``abort``: the job id
    drawn here is shared by all of them.
    """

    def __init__(self, options: WriteOptions, layout: InputLayout) -> None:
        self.options = options
        self.layout = layout
        self.job_id = uuid.uuid4().hex
        #: whether the commit moves inside the broker, so each task attempt stages apart (and
        #: ``NoNodeReachable`` now, before any task, when no node answers)
        self.attempt_staging = probe_attempt_staging(options, unreachable_fails=True)

    def __repr__(self) -> str:
        return f"ClusterMQBatchWriter(queue={self.options.connection.queue!r}, job={self.job_id})"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ClusterMQCommitMessage:
        return write_task(self.options, self.layout, task_identity(self.job_id, False), iterator,
                          self.attempt_staging)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_job(self.options, f"job {self.job_id}", self.job_id, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_job(self.options, f"job {self.job_id}", self.job_id, messages, self.attempt_staging)


class ClusterMQStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("clustermq")``: one staged job per micro-batch.

    Spark creates this object anew for the tasks of every batch and again, in another process,
    for every ``commit``/``abort``: nothing is shared through it. The query id (the job id of
    the staging queues) and the node list the tasks published by reach ``commit`` in the tasks'
    commit messages.
    """

    def __init__(self, options: WriteOptions, layout: InputLayout) -> None:
        self.options = options
        self.layout = layout
        self.fallback_id = uuid.uuid4().hex

    def __repr__(self) -> str:
        return f"ClusterMQStreamWriter(queue={self.options.connection.queue!r})"

    def __getstate__(self) -> dict[str, Any]:
        """With ``discovery=cluster`` the node list is asked for here: Spark pickles the writer
        once per micro-batch, on the driver, for that batch's tasks (``commit``/``abort`` get a
        fresh, unpickled one). So every task of a batch publishes by one list, a node that
        joined is written to from the next batch on, and no commit waits for a discovery it
        would not use (it takes the tasks' list). Whether the commit can move inside the
        broker is asked here too, once per writer object (``commit`` reads it from the tasks'
        messages)."""
        options = discovered(self.options)
        if "attempt_staging" not in self.__dict__:
            self.attempt_staging = probe_attempt_staging(options)
        return {**self.__dict__, "options": options}

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ClusterMQCommitMessage:
        return write_task(self.options, self.layout, task_identity(self.fallback_id, True), iterator,
                          getattr(self, "attempt_staging", False))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks = winners(messages)
        if not tasks:
            report(f"batch {batchId} committed 0 messages (no rows)")
            return
        job = tasks[0].job_id
        commit_job(batch_options(self.options, tasks), f"query {job} batch {batchId}", job, messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks = winners(messages)
        job = tasks[0].job_id if tasks else None
        options = batch_options(self.options, tasks) if tasks else self.options
        abort_job(options, f"query {job or '(id unknown)'} batch {batchId}", job, messages)


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
