"""The reader's output schema and the compact form partitions travel in (Arrow IPC bytes).

Rows are built once in the driver, as Arrow, and shipped to executors as an IPC stream; the
executor only deserialises, so ``read()`` costs almost nothing per row and the batches match
the declared schema exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from clustermq.broker.dialect import BrokerDialect
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
) -> tuple[pa.RecordBatch, list[str | None]]:
    """One node's messages as a record batch, plus each row's group id (for bucketing)."""
    rows = list(messages)
    groups = [dialect.group_id(m.headers, group_header) for m in rows]
    timestamps = []
    for m in rows:
        millis = _int_or_none(m.headers.get("timestamp"))
        timestamps.append(None if not millis else millis * 1000)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([node_name] * len(rows), pa.string()),
            pa.array([m.headers.get("destination") for m in rows], pa.string()),
            pa.array([dialect.message_id(m.headers, node_name) for m in rows], pa.string()),
            pa.array(groups, pa.string()),
            pa.array([m.seq for m in rows], pa.int64()),
            pa.array([m.headers.get("redelivered") == "true" for m in rows], pa.bool_()),
            pa.array([_int_or_none(m.headers.get("priority")) for m in rows], pa.int32()),
            pa.array(timestamps, pa.timestamp("us", tz="UTC")),
            pa.array([list(m.headers.items()) for m in rows], pa.map_(pa.string(), pa.string())),
            pa.array([m.body for m in rows], pa.binary()),
        ],
        schema=ARROW_SCHEMA,
    )
    return batch, groups


def to_ipc(batches: list[pa.RecordBatch]) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, ARROW_SCHEMA) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> Iterator[pa.RecordBatch]:
    reader = pa.ipc.open_stream(pa.py_buffer(data))
    for batch in reader:
        if batch.num_rows:
            yield batch
