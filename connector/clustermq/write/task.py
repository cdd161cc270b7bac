"""The task side of a write: who the task is, and its rows published where the write mode says.

Message ids (``clustermq_id`` = ``<job>:<batch>:<partition>:<row>``) take job and batch from:

* a batch write: ``<job>`` is a uuid drawn in ``writer()`` on the driver (the writer object is
  pickled to every task and back to ``commit``), ``<batch>`` is 0;
* a streaming write: ``<job>`` is the streaming query id (stable across restarts, from the
  checkpoint) and ``<batch>`` the micro-batch id; tasks read both from the local properties
  Spark sets on every job of a micro-batch (``sql.streaming.queryId``,
  ``streaming.sql.batchId``). A re-run of a batch after a failure therefore re-publishes the
  same ids for the same rows, provided the batch's input and partitioning are deterministic.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from clustermq.broker.nodes import Node
from clustermq.options import WriteOptions
from clustermq.write.layout import InputLayout
from clustermq.write.load_balancing import among, job_key, task_node
from clustermq.write.message_builder import MessageBuilder
from clustermq.write.modes import JobStaging, TaskRoute, WriteMode
from clustermq.write.publisher import TaskPublisher

log = logging.getLogger("clustermq.writer")


@dataclass
class ClusterMQCommitMessage(WriterCommitMessage):
    """What a task reports to the driver: which attempt staged how many messages where."""

    job_id: str
    batch_id: int
    partition: int
    attempt: int
    task_tag: str
    rows: int
    counts: dict[int, int]
    unavailable: dict[str, str]
    seconds: float
    #: the node list the task published by (its staging queues' indices point into it): a
    #: streaming commit moves by this list, not by one it would discover itself
    nodes: tuple[Node, ...] = ()
    #: how the task published, so the commit finishes the same way (write/modes.py)
    mode: WriteMode = JobStaging()


def winners(messages: Sequence[WriterCommitMessage | None]) -> list[ClusterMQCommitMessage]:
    """The commit messages of the task attempts Spark kept (``None`` for tasks with no rows)."""
    return [m for m in messages if isinstance(m, ClusterMQCommitMessage)]


@dataclass(frozen=True)
class TaskIdentity:
    job_id: str
    batch_id: int
    partition: int
    attempt: int


def task_identity(fallback_job: str, streaming: bool) -> TaskIdentity:
    """Who this task is: job (or query) id, batch id, partition, attempt (from TaskContext).
    Only inside a Spark task; below Spark, :func:`write_task` takes a :class:`TaskIdentity`."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None, "write() runs in a Spark task"
    job, batch = fallback_job, 0
    if streaming:
        query = context.getLocalProperty("sql.streaming.queryId")
        batch_text = context.getLocalProperty("streaming.sql.batchId")
        if query and batch_text is not None:
            job, batch = query, int(batch_text)
        else:
            log.warning("clustermq: no streaming query id / batch id in the task's local "
                        "properties; message ids use the writer's id %s instead", fallback_job)
    return TaskIdentity(job, batch, context.partitionId(), context.attemptNumber())


def write_task(
    options: WriteOptions,
    layout: InputLayout,
    identity: TaskIdentity,
    batches: Iterator[pa.RecordBatch],
    mode: WriteMode,
) -> ClusterMQCommitMessage:
    """Publish one task's rows where the write's ``mode`` says (the job's staging queues, this
    attempt's own, or the queues themselves); commit them with receipts.

    Any error (a bad row, no reachable node) aborts every open transaction before it
    propagates, so the task leaves nothing staged.
    """
    started = time.monotonic()
    tag = uuid.uuid4().hex
    candidates = among(options.priority, len(options.connection.nodes))
    default_node = candidates[task_node(
        options.load_balancing_policy, len(candidates), job_key(identity.job_id, identity.batch_id),
        identity.partition,
    )]
    builder = MessageBuilder(
        layout, options, identity.job_id, identity.batch_id, identity.partition, tag, default_node
    )
    publisher = TaskPublisher(
        options,
        TaskRoute(mode, options.connection.queue, identity.job_id, tag, options.connection.is_topic),
        task_label=(f"clustermq writer task (partition {identity.partition}, "
                    f"attempt {identity.attempt})"),
    )
    try:
        for batch in batches:
            for message in builder.messages(batch):
                publisher.send(message)
        counts = publisher.commit()
    except BaseException:
        publisher.abort()
        raise
    finally:
        publisher.close()
    return ClusterMQCommitMessage(
        job_id=identity.job_id, batch_id=identity.batch_id, partition=identity.partition,
        attempt=identity.attempt, task_tag=tag, rows=builder.row, counts=counts,
        unavailable=publisher.dead_nodes, seconds=time.monotonic() - started,
        nodes=tuple(options.connection.nodes), mode=mode,
    )
