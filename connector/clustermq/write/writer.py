"""``df.write`` / ``df.writeStream`` ``.format("clustermq")``: rows in, messages out.

Driver side: the input columns are checked once, before any task runs (:func:`input_layout`).
Executor side: each task turns its rows into messages (:class:`MessageBuilder`) and publishes
them with a :class:`~clustermq.write.publisher.TaskPublisher` into the job's staging queues. Driver
side again: ``commit()`` moves the staged messages into the queue (``staging.move_job``) and
``abort()`` drops them (``staging.purge_job``). Why the detour through staging is in
``staging.py``: a Python writer is not told that its task failed.

Every message carries ``clustermq_id`` = ``<job>:<batch>:<partition>:<row>``:

* a batch write: ``<job>`` is a uuid drawn in ``writer()`` on the driver (the writer object is
  pickled to every task and back to ``commit``), ``<batch>`` is 0;
* a streaming write: ``<job>`` is the streaming query id (stable across restarts, from the
  checkpoint) and ``<batch>`` the micro-batch id; tasks read both from the local properties
  Spark sets on every job of a micro-batch (``sql.streaming.queryId``,
  ``streaming.sql.batchId``). A re-run of a batch after a failure therefore re-publishes the
  same ids for the same rows, provided the batch's input and partitioning are deterministic.
"""

from __future__ import annotations

import datetime as _dt
import logging
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from clustermq.broker.queue_names import queue_name
from clustermq.errors import InputError
from clustermq.logs import apply_log_level
from clustermq.options import OptionError, WriteOptions
from clustermq.write.headers import (
    CLUSTERMQ_PREFIX,
    ID_HEADER,
    JOB_HEADER,
    TARGET_HEADER,
    TASK_HEADER,
    staging_queue,
)
from clustermq.write.load_balancing import group_node, job_key, task_node
from clustermq.write.publisher import Outgoing, TaskPublisher
from clustermq.write.staging import NodeMove, StagedTask, move_job, purge_job

log = logging.getLogger("clustermq.writer")

#: the columns the writer understands; anything else is an error or (headersFromColumns) a header
WRITE_COLUMNS = ("body", "group_id", "headers", "priority", "destination")

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
_HEADER_VALUE_TYPES = _INTEGRAL + (
    StringType, BooleanType, FloatType, DoubleType, DecimalType, DateType, TimestampType,
    TimestampNTZType,
)
#: header names a row may not set: STOMP frame headers, ones the writer sets from columns or
#: options, and the connector's own
_RESERVED_HEADERS = frozenset(
    {
        "destination", "transaction", "receipt", "receipt-id", "content-length", "message-id",
        "subscription", "ack", "id", "redelivered", "timestamp", "persistent", "priority",
        "jmsxgroupid", "_amq_group_id", "_amq_dupl_id", "destination-type",
    }
)


# ---------------------------------------------------------------------------- input columns
@dataclass(frozen=True)
class InputLayout:
    """Which input column plays which part (actual column names, as Spark passes them)."""

    body: str
    body_is_text: bool
    group_id: str | None = None
    headers: str | None = None
    priority: str | None = None
    destination: str | None = None
    header_columns: tuple[str, ...] = ()


def _type_name(data_type: DataType) -> str:
    return data_type.simpleString()


def _check_header_name(name: str, group_header: str) -> str | None:
    """Why ``name`` cannot be a user header, or ``None`` if it can."""
    # stomp.py (9.0) escapes header values but not names: a '\\' in a name goes out raw, and
    # Artemis refuses the frame ("AMQ339040 Undefined escape sequence", measured on 2.40.0).
    if not name or any(c in name for c in ":\r\n\\"):
        return ("is not a valid STOMP header name (empty, or contains ':', '\\' or a line "
                "break)")
    lowered = name.lower()
    if lowered in _RESERVED_HEADERS or lowered == group_header.lower():
        return "is reserved (set by the writer from a column or an option)"
    if lowered.startswith(CLUSTERMQ_PREFIX):
        return f"is reserved (the '{CLUSTERMQ_PREFIX}' prefix belongs to the connector)"
    return None


def input_layout(schema: StructType, options: WriteOptions) -> InputLayout:
    """Check the DataFrame's columns on the driver; raise ``OptionError`` naming the column."""
    by_name: dict[str, Any] = {}
    for f in schema.fields:
        by_name[f.name.lower()] = f
    if "body" not in by_name:
        raise OptionError(
            "the clustermq writer needs a 'body' column (binary or string); input columns: "
            + ", ".join(f.name for f in schema.fields)
        )
    body = by_name["body"]
    if not isinstance(body.dataType, (BinaryType, StringType)):
        raise OptionError(
            f"input column '{body.name}' must be binary or string, not {_type_name(body.dataType)}"
        )
    wanted: dict[str, tuple[type, ...]] = {
        "group_id": (StringType,) + _INTEGRAL,
        "headers": (MapType,),
        "priority": _INTEGRAL,
        "destination": (StringType,),
    }
    expected_text = {
        "group_id": "string (or an integer type)",
        "headers": "map<string,string>",
        "priority": "an integer type (0-9)",
        "destination": "string (a queue name)",
    }
    roles: dict[str, str | None] = {}
    for role, types in wanted.items():
        f = by_name.get(role)
        if f is None:
            roles[role] = None
            continue
        ok = isinstance(f.dataType, types)
        if ok and role == "headers":
            ok = isinstance(f.dataType.keyType, StringType) and isinstance(f.dataType.valueType, StringType)
        if not ok:
            raise OptionError(
                f"input column '{f.name}' must be {expected_text[role]}, not {_type_name(f.dataType)}"
            )
        roles[role] = f.name
    extra = [f for f in schema.fields if f.name.lower() not in WRITE_COLUMNS]
    group_header = options.connection.group_id_header
    if extra and not options.headers_from_columns:
        names = ", ".join(f"'{f.name}'" for f in extra)
        raise OptionError(
            f"input column {names} is not a clustermq writer column (allowed: "
            f"{', '.join(WRITE_COLUMNS)}); drop it, or set headersFromColumns=true to send "
            "it as a message header"
        )
    for f in extra:
        why = _check_header_name(f.name, group_header)
        if why:
            raise OptionError(f"input column '{f.name}' cannot become a header: the name {why}")
        if not isinstance(f.dataType, _HEADER_VALUE_TYPES):
            raise OptionError(
                f"input column '{f.name}' cannot become a header: type "
                f"{_type_name(f.dataType)} is not a string, number, boolean, date or timestamp"
            )
    return InputLayout(
        body=body.name,
        body_is_text=isinstance(body.dataType, StringType),
        group_id=roles["group_id"],
        headers=roles["headers"],
        priority=roles["priority"],
        destination=roles["destination"],
        header_columns=tuple(f.name for f in extra),
    )


# ---------------------------------------------------------------------------- rows -> messages
def _header_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


@dataclass
class MessageBuilder:
    """Turns one task's Arrow batches into :class:`Outgoing` messages, counting rows."""

    layout: InputLayout
    options: WriteOptions
    job_id: str
    batch_id: int
    partition: int
    task_tag: str
    default_node: int
    row: int = 0
    _fixed: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._fixed = {JOB_HEADER: self.job_id, TASK_HEADER: self.task_tag}
        if self.options.persistent:
            self._fixed["persistent"] = "true"
        self._prefix = f"{self.job_id}:{self.batch_id}:{self.partition}:"
        self._nodes = len(self.options.connection.nodes)
        self._queue = self.options.connection.queue
        self._group_header = self.options.connection.group_id_header
        self._checked_destinations: set[str] = set()

    def _where(self, row: int) -> str:
        return f"row {row} of partition {self.partition}"

    def messages(self, batch: pa.RecordBatch) -> Iterator[Outgoing]:
        layout = self.layout

        def column(name: str | None) -> list[Any] | None:
            if name is None:
                return None
            return batch.column(batch.schema.get_field_index(name)).to_pylist()

        bodies = column(layout.body)
        assert bodies is not None
        groups = column(layout.group_id)
        header_maps = column(layout.headers)
        priorities = column(layout.priority)
        destinations = column(layout.destination)
        extra = [(name, column(name)) for name in layout.header_columns]
        for i in range(batch.num_rows):
            row = self.row
            self.row += 1
            body = bodies[i]
            if body is None:
                raise InputError(f"{self._where(row)} has a null body; every message needs a body")
            if isinstance(body, str):
                body = body.encode("utf-8")
            headers = dict(self._fixed)
            if header_maps is not None and header_maps[i]:
                for key, value in header_maps[i]:
                    why = _check_header_name(key, self._group_header)
                    if why:
                        raise InputError(f"{self._where(row)}: header '{key}' {why}")
                    if value is None:
                        raise InputError(f"{self._where(row)}: header '{key}' has a null value")
                    headers[key] = value
            for name, values in extra:
                assert values is not None
                if values[i] is not None:
                    headers[name] = _header_text(values[i])
            if priorities is not None and priorities[i] is not None:
                priority = priorities[i]
                if not 0 <= priority <= 9:
                    raise InputError(f"{self._where(row)}: priority {priority} is outside 0-9")
                headers["priority"] = str(priority)
            target = self._queue
            if destinations is not None and destinations[i] is not None:
                target = self._destination(destinations[i], row)
            headers[TARGET_HEADER] = target
            headers[ID_HEADER] = f"{self._prefix}{row}"
            group = groups[i] if groups is not None else None
            if group is not None:
                group = str(group)
                preferred = group_node(group, self._nodes)
                headers[self._group_header] = group
            else:
                preferred = self.default_node
            yield Outgoing(preferred=preferred, headers=headers, body=body, group_id=group,
                           label=self._where(row))

    def _destination(self, value: str, row: int) -> str:
        if value not in self._checked_destinations:
            try:
                queue_name(value, "destination")
            except OptionError as exc:
                raise InputError(
                    f"{self._where(row)}: destination {value!r} is not a queue name: "
                    + str(exc).replace("option 'queue': ", "")
                ) from None
            self._checked_destinations.add(value)
        return value


# ---------------------------------------------------------------------------- task side
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


@dataclass(frozen=True)
class TaskIdentity:
    job_id: str
    batch_id: int
    partition: int
    attempt: int


def task_identity(fallback_job: str, streaming: bool) -> TaskIdentity:
    """Who this task is: job (or query) id, batch id, partition, attempt (from TaskContext)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # called outside Spark (tests of the write path)
        return TaskIdentity(fallback_job, 0, 0, 0)
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
) -> ClusterMQCommitMessage:
    """Publish one task's rows into the job's staging queues; commit them with receipts.

    Any error (a bad row, no reachable node) aborts every open transaction before it
    propagates, so the task leaves nothing staged.
    """
    started = time.monotonic()
    tag = uuid.uuid4().hex
    nodes = len(options.connection.nodes)
    default_node = task_node(
        options.load_balancing_policy, nodes, job_key(identity.job_id, identity.batch_id),
        identity.partition,
    )
    builder = MessageBuilder(
        layout, options, identity.job_id, identity.batch_id, identity.partition, tag, default_node
    )
    queue, job = options.connection.queue, identity.job_id
    publisher = TaskPublisher(
        options,
        destination=lambda index, dialect: dialect.destination(staging_queue(queue, job, index)),
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
    )


# ---------------------------------------------------------------------------- driver side
def _report(text: str, warning: bool = False) -> None:
    """Log on the driver. Spark's Python workers configure no logging (unless
    ``CLUSTERMQ_LOG_LEVEL`` is set, see logs.py): then write to stderr, which Spark forwards to
    the driver's log."""
    apply_log_level()
    log.log(logging.WARNING if warning else logging.INFO, text)
    if not log.hasHandlers():
        print(f"clustermq: {text}", file=sys.stderr, flush=True)


def _winners(messages: Sequence[WriterCommitMessage | None]) -> list[ClusterMQCommitMessage]:
    return [m for m in messages if isinstance(m, ClusterMQCommitMessage)]


def _commit_job(options: WriteOptions, what: str, job_id: str,
                messages: Sequence[WriterCommitMessage | None]) -> list[NodeMove]:
    tasks = _winners(messages)
    started = time.monotonic()
    results = move_job(
        options, job_id, [StagedTask(m.task_tag, m.counts) for m in tasks], options.connection.queue
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
    if unavailable:
        text += "; nodes unavailable to tasks: " + ", ".join(unavailable)
    if notes:
        text += "; " + "; ".join(notes)
    _report(text)
    return results


def _abort_job(options: WriteOptions, what: str, job_id: str | None) -> None:
    queue = options.connection.queue
    if job_id is None:
        _report(f"{what} aborted: nothing was published to '{queue}'; no task reported staged "
                "messages (what a failed task may have staged is dropped by the query's next "
                "committed batch)", warning=True)
        return
    results = purge_job(options, job_id, queue)
    dropped = sum(r.dropped for r in results)
    problems = [f"{r.node}: {r.error}" for r in results if r.error]
    text = f"{what} aborted: nothing was published to '{queue}'; {dropped} staged messages dropped"
    if problems:
        text += "; " + "; ".join(problems)
    _report(text, warning=True)


class ClusterMQBatchWriter(DataSourceArrowWriter):
    """``df.write.format("clustermq").mode("append").save()``.

    Created on the driver, pickled to every task and back to ``commit``/``abort``: the job id
    drawn here is shared by all of them.
    """

    def __init__(self, options: WriteOptions, layout: InputLayout) -> None:
        self.options = options
        self.layout = layout
        self.job_id = uuid.uuid4().hex

    def __repr__(self) -> str:
        return f"ClusterMQBatchWriter(queue={self.options.connection.queue!r}, job={self.job_id})"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ClusterMQCommitMessage:
        return write_task(self.options, self.layout, task_identity(self.job_id, False), iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit_job(self.options, f"job {self.job_id}", self.job_id, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort_job(self.options, f"job {self.job_id}", self.job_id)


class ClusterMQStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("clustermq")``: one staged job per micro-batch.

    Spark creates this object anew for the tasks of every batch and again, in another process,
    for every ``commit``/``abort``: nothing is shared through it. The query id (the job id of
    the staging queues) reaches ``commit`` in the tasks' commit messages.
    """

    def __init__(self, options: WriteOptions, layout: InputLayout) -> None:
        self.options = options
        self.layout = layout
        self.fallback_id = uuid.uuid4().hex

    def __repr__(self) -> str:
        return f"ClusterMQStreamWriter(queue={self.options.connection.queue!r})"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ClusterMQCommitMessage:
        return write_task(self.options, self.layout, task_identity(self.fallback_id, True), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks = _winners(messages)
        if not tasks:
            _report(f"batch {batchId} committed 0 messages (no rows)")
            return
        job = tasks[0].job_id
        _commit_job(self.options, f"query {job} batch {batchId}", job, messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks = _winners(messages)
        job = tasks[0].job_id if tasks else None
        _abort_job(self.options, f"query {job or '(id unknown)'} batch {batchId}", job)
