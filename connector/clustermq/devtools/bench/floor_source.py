"""A streaming source with no broker behind it: the floor under the reader's ratios.

Why: on a backlog that a raw client drains in one or two seconds, the reader's end-to-end ratio
is bounded by what Spark itself spends on a query with a Python source: starting the source's
Python process, planning and committing every batch, shipping each batch's rows inside its
tasks. This source serves the rows the reader would (its schema, built by its own row code, as
Arrow IPC partitions bucketed by group, the same batch limit) from memory, so the bench can show
how much of a ratio Spark takes before any broker is asked.

Registered by the bench only; users never see it. It imports the clustermq package, as the
reader's source does, and nothing of the bench, so its Python process starts as the reader's does
(the scenario that runs it is bench/floor.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from clustermq.broker.dialect.classic_dialect import ClassicDialect
from clustermq.read.messages import BufferedMessage
from clustermq.read.partitions import MessagesPartition, bucket_rows, read_partition
from clustermq.read.schema import READ_SCHEMA_DDL

FORMAT = "clustermq-bench-floor"
#: the reader's default numPartitions is one per node
_NODES = ("n0", "n1", "n2")
_DESTINATION = "/queue/bench.floor"


def _message(i: int, groups: int, body: bytes, millis: int) -> BufferedMessage:
    """Message ``i`` with the headers a Classic node delivers for a load generator's message."""
    headers = {
        "destination": _DESTINATION, "message-id": f"ID:floor-{i}", "priority": "4",
        "timestamp": str(millis), "expires": "0", "persistent": "true", "subscription": "1",
        "ack": f"ID:floor-ack-{i}", "content-length": str(len(body)),
        "JMSXGroupID": f"g{i % groups}", "loadgen_id": str(i), "loadgen_group_seq": str(i // groups),
    }
    return BufferedMessage(headers=headers, body=body, ack_id=headers["ack"], generation=0,
                           arrival=i, seq=i // len(_NODES))


class FloorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``messages`` rows in batches of at most ``maxMessagesPerTrigger``, then nothing."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # ``options`` is Spark's case-insensitive map: a plain dict of it has lower-case keys
        self.total = int(options["messages"])
        self.max_rows = int(options.get("maxMessagesPerTrigger", self.total))
        self.groups = int(options.get("groups", 1000))
        self.body = b"x" * int(options.get("bodySize", 256))

    def initialOffset(self) -> dict[str, int]:
        return {"offset": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict[str, int]:
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.total
        return {"offset": min(self.total, int(start["offset"]) + rows)}

    def prepareForTriggerAvailableNow(self) -> None:
        """The backlog is fixed at ``messages``: nothing to count."""

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The rows as the reader plans them: per node, bucketed by group, Arrow IPC."""
        first, last = int(start["offset"]), int(end["offset"])
        if first >= last:
            return []
        millis = int(time.time() * 1000)
        messages: list[list[BufferedMessage]] = [[] for _ in _NODES]
        for i in range(first, last):
            messages[i % len(_NODES)].append(_message(i, self.groups, self.body, millis))
        dialect = ClassicDialect()
        return bucket_rows([(node, dialect) for node in _NODES], list(enumerate(messages)),
                           len(_NODES), "")

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, MessagesPartition)
        return read_partition(partition)


class FloorDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return READ_SCHEMA_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return FloorStreamReader(self.options)

