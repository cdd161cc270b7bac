"""Rows -> messages: one task's Arrow batches become :class:`Outgoing` messages with their ids.

Every message carries ``clustermq_id`` = ``<job>:<batch>:<partition>:<row>`` (see
:mod:`clustermq.write.task` for where job and batch come from), so a re-run of a task
re-publishes the same ids for the same rows. A row that cannot become a message fails the
task with an ``InputError`` naming its partition and index.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa

from clustermq.broker.queue_names import queue_name
from clustermq.errors import InputError, OptionError
from clustermq.options import WriteOptions
from clustermq.write.headers import ID_HEADER, JOB_HEADER, TARGET_HEADER, TASK_HEADER
from clustermq.write.layout import InputLayout, check_header_name
from clustermq.write.load_balancing import among, group_node
from clustermq.write.publisher import Outgoing


def header_text(value: Any) -> str:
    """A headersFromColumns value as header text (ISO dates, plain decimals, true/false)."""
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
        self._candidates = among(self.options.priority, self._nodes)
        self._queue = self.options.connection.queue
        self._group_header = self.options.connection.group_id_header
        self._checked_destinations: set[str] = set()
        self._column_headers = self.layout.jms_headers()

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
        ttls = column(layout.ttl)
        correlation_ids = column(layout.correlation_id)
        reply_tos = column(layout.reply_to)
        types = column(layout.jms_type)
        now_ms = int(time.time() * 1000)  # JMSExpiration counts from the send, as a JMS producer's
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
                    why = check_header_name(key, self._group_header)
                    if why:
                        raise InputError(f"{self._where(row)}: header '{key}' {why}")
                    if value is None:
                        raise InputError(f"{self._where(row)}: header '{key}' has a null value")
                    if key.lower() in self._column_headers:
                        raise InputError(f"{self._where(row)}: header '{key}' is set by a column of "
                                         "the input; set it there only")
                    headers[key] = value
            for name, values in extra:
                assert values is not None
                if values[i] is not None:
                    headers[name] = header_text(values[i])
            if priorities is not None and priorities[i] is not None:
                priority = priorities[i]
                if not 0 <= priority <= 9:
                    raise InputError(f"{self._where(row)}: priority {priority} is outside 0-9")
                headers["priority"] = str(priority)
            if ttls is not None and ttls[i] is not None:
                if ttls[i] < 0:
                    raise InputError(f"{self._where(row)}: ttl {ttls[i]} is negative; give "
                                     "milliseconds to live, or 0 or null for no expiry")
                if ttls[i] > 0:
                    headers["expires"] = str(now_ms + ttls[i])
            if correlation_ids is not None and correlation_ids[i] is not None:
                headers["correlation-id"] = correlation_ids[i]
            if types is not None and types[i] is not None:
                headers["type"] = types[i]
            reply_to = None
            if reply_tos is not None and reply_tos[i] is not None:
                reply_to = self._destination(reply_tos[i], row, "reply_to")
            target = self._queue
            if destinations is not None and destinations[i] is not None:
                target = self._destination(destinations[i], row, "destination")
            headers[TARGET_HEADER] = target
            headers[ID_HEADER] = f"{self._prefix}{row}"
            group = groups[i] if groups is not None else None
            if group is not None:
                group = str(group)
                preferred = self._candidates[group_node(group, len(self._candidates))]
                headers[self._group_header] = group
            else:
                preferred = self.default_node
            yield Outgoing(preferred=preferred, headers=headers, body=body, group_id=group,
                           label=self._where(row), reply_to=reply_to)

    def _destination(self, value: str, row: int, column: str) -> str:
        """``value`` of a column that names a queue, checked as the ``queue`` option is."""
        if value not in self._checked_destinations:
            try:
                queue_name(value, column)
            except OptionError as exc:
                raise InputError(
                    f"{self._where(row)}: {column} {value!r} is not a queue name: "
                    + str(exc).replace(f"option '{column}': ", "")
                ) from None
            self._checked_destinations.add(value)
        return value
