"""Partitions: planned in the driver, read on executors.

A partition carries its rows as Arrow IPC bytes, so the executor side needs no broker
connection and no state: it only turns bytes back into record batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from clustermq.groups import bucket_for_group, bucket_for_ungrouped
from clustermq.read.schema import arrow_schema, from_ipc, rows_batch, to_ipc
from clustermq.read.slots import bucket_for_slot

if TYPE_CHECKING:
    from clustermq.broker.dialect import BrokerDialect
    from clustermq.options import ReadOptions
    from clustermq.read.consumer import ClusterConsumer
    from clustermq.read.messages import BufferedMessage


class MessagesPartition(InputPartition):
    """One Spark partition of a micro-batch: Arrow IPC bytes and a row count for the logs."""

    def __init__(self, index: int, rows: int, data: bytes) -> None:
        super().__init__(index)
        self.index = index
        self.rows = rows
        self.data = data

    def __repr__(self) -> str:
        return f"MessagesPartition(index={self.index}, rows={self.rows}, bytes={len(self.data)})"


def plan_partitions(
    consumer: ClusterConsumer,
    taken: list[tuple[int, list[BufferedMessage]]],
    options: ReadOptions,
) -> list[MessagesPartition]:
    """Bucket every node's rows by group hash into ``numPartitions`` partitions (see
    :func:`bucket_rows`)."""
    sources = [(sub.node.name, sub.dialect) for sub in consumer.subscriptions]
    return bucket_rows(sources, taken, options.num_partitions, options.connection.group_id_header,
                       options.include_delivery_count)


def bucket_rows(
    sources: Sequence[tuple[str, BrokerDialect | None]],
    taken: list[tuple[int, list[BufferedMessage]]],
    n: int,
    header: str,
    delivery_count: bool = False,
) -> list[MessagesPartition]:
    """Bucket rows by group hash into ``n`` partitions; a row whose group the broker does not
    show goes by its group slot (read/slots.py). ``sources`` names each node index's node and
    dialect; ``taken`` holds (node index, rows).

    Within a partition rows keep node order, then delivery order, so a group (which a
    well-behaved producer keeps on one node) is read in broker delivery order.
    """
    per_partition: list[list[pa.RecordBatch]] = [[] for _ in range(n)]
    counts = [0] * n
    for node_index, messages in taken:
        if not messages:
            continue
        node_name, dialect = sources[node_index]
        assert dialect is not None
        buckets: list[tuple[list[BufferedMessage], list[str | None]]] = [([], []) for _ in range(n)]
        for message in messages:
            group = dialect.group_id(message.headers, header)
            if group is None and message.slot is not None:  # a group the broker hid
                p = bucket_for_slot(message.slot, node_index, n)
            elif group is None:
                p = bucket_for_ungrouped(message.seq, node_index, n)
            else:
                p = bucket_for_group(group, n)
            buckets[p][0].append(message)
            buckets[p][1].append(group)
        for p, (rows, groups) in enumerate(buckets):
            if rows:
                per_partition[p].append(rows_batch(node_name, rows, groups, dialect, delivery_count))
                counts[p] += len(rows)
    return [
        MessagesPartition(p, counts[p], to_ipc(per_partition[p], arrow_schema(delivery_count)))
        for p in range(n)
    ]


def read_partition(partition: MessagesPartition) -> Iterator[pa.RecordBatch]:
    return from_ipc(partition.data)
