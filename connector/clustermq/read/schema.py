"""The reader's output schema and the compact form partitions travel in (Arrow IPC bytes).

Rows are built once in the driver, as Arrow, and shipped to executors as an IPC stream; the
executor only deserialises, so ``read()`` costs almost nothing per row and the batches match
the declared schema exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from clustermq.broker.dialect import BrokerDialect
from clustermq.read.amqp_message import DELIVERY_COUNT_HEADER
from clustermq.read.columns import (
    binary_column,
    bool_column,
    int_column,
    repeated_string_column,
    string_column,
    string_map_column,
)
from clustermq.read.messages import BufferedMessage

READ_SCHEMA_DDL = (
    "node string, destination string, message_id string, group_id string, sequence long, "
    "redelivered boolean, priority int, timestamp timestamp, "
    "headers map<string,string>, body binary"
)

ARROW_SCHEMA = pa.schema(
    [
        pa.field("node", pa.string()),
        pa.field("destination", pa.string()),
        pa.field("message_id", pa.string()),
        pa.field("group_id", pa.string()),
        pa.field("sequence", pa.int64()),
        pa.field("redelivered", pa.bool_()),
        pa.field("priority", pa.int32()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("headers", pa.map_(pa.string(), pa.string())),
        pa.field("body", pa.binary()),
    ]
)


#: the opt-in column (``includeDeliveryCount``), last so that the others keep their places
DELIVERY_COUNT = pa.field("delivery_count", pa.int32())
ARROW_SCHEMA_WITH_DELIVERY_COUNT = ARROW_SCHEMA.append(DELIVERY_COUNT)


def read_schema_ddl(delivery_count: bool) -> str:
    """The reader's schema, with ``delivery_count`` when the options ask for it."""
    return f"{READ_SCHEMA_DDL}, {DELIVERY_COUNT.name} int" if delivery_count else READ_SCHEMA_DDL


def arrow_schema(delivery_count: bool) -> pa.Schema:
    return ARROW_SCHEMA_WITH_DELIVERY_COUNT if delivery_count else ARROW_SCHEMA


def _int_or_none(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def to_record_batch(
    node_name: str,
    messages: Iterable[BufferedMessage],
    dialect: BrokerDialect,
    group_header: str,
    delivery_count: bool = False,
) -> tuple[pa.RecordBatch, list[str | None]]:
    """One node's messages as a record batch, plus each row's group id (for bucketing)."""
    rows = list(messages)
    groups = [dialect.group_id(m.headers, group_header) for m in rows]
    return rows_batch(node_name, rows, groups, dialect, delivery_count), groups


def rows_batch(
    node_name: str, rows: list[BufferedMessage], groups: list[str | None], dialect: BrokerDialect,
    delivery_count: bool = False,
) -> pa.RecordBatch:
    """``rows`` of one node as a record batch; ``groups`` holds each row's group id."""
    timestamps = []
    for m in rows:
        millis = _int_or_none(m.headers.get("timestamp"))
        timestamps.append(None if not millis else millis * 1000)
    counts = []
    if delivery_count:
        counts.append(int_column([_int_or_none(m.headers.get(DELIVERY_COUNT_HEADER)) for m in rows],
                                 DELIVERY_COUNT.type))
    return pa.RecordBatch.from_arrays(
        [
            repeated_string_column(node_name, len(rows)),
            string_column([m.headers.get("destination") for m in rows]),
            string_column([dialect.message_id(m.headers, node_name) for m in rows]),
            string_column(groups),
            int_column([m.seq for m in rows], pa.int64()),
            bool_column([m.copy or m.headers.get("redelivered") == "true" for m in rows]),
            int_column([_int_or_none(m.headers.get("priority")) for m in rows], pa.int32()),
            int_column(timestamps, ARROW_SCHEMA.field("timestamp").type),
            string_map_column([m.headers for m in rows]),
            binary_column([m.body for m in rows]),
            *counts,
        ],
        schema=arrow_schema(delivery_count),
    )


def to_ipc(batches: list[pa.RecordBatch], schema: pa.Schema = ARROW_SCHEMA) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> Iterator[pa.RecordBatch]:
    reader = pa.ipc.open_stream(pa.py_buffer(data))
    for batch in reader:
        if batch.num_rows:
            yield batch
