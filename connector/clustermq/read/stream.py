"""The micro-batch stream: Spark's calls translated into consumer operations.

Acknowledge-on-commit (docs/design.md, "Acknowledgement on commit"): Spark calls ``latestOffset(start, limit)`` only after the
commit log holds every batch up to ``start``, so acknowledging below ``start`` there is exactly
"after the batch committed", with no one-batch lag, including the last batch before an idle
period and the end of an AvailableNow run. ``commit(end)`` (late, not for every batch) does the
same, cumulatively and idempotently.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from clustermq.broker.depth import QueueDepths, connection_depths
from clustermq.logs import apply_log_level
from clustermq.options import ReadOptions
from clustermq.read.consumer import ClusterConsumer
from clustermq.read.lag import BacklogMonitor, NodeLag, lag_report
from clustermq.read.offsets import NodeOffsets, make_offsets, parse_offsets
from clustermq.read.partitions import MessagesPartition, plan_partitions, read_partition
from clustermq.read.worker_exit import stop_in_order_on_sigterm
from clustermq.read.worker_memory import keep_batches_out_of_the_heap

log = logging.getLogger("clustermq.stream")

# While the buffer is empty, wait this long for a delivery before answering "no new data":
# it spares Spark's trigger loop a Python round trip every few milliseconds.
_EMPTY_POLL_S = 0.2
# The run's first batch, and one whose call found the buffer empty before deliveries began (a
# burst after an idle spell), keeps filling while deliveries keep coming: answered at the first
# delivery, the first batch of a cold 60,000-message Classic backlog held 1-430 messages and
# cost a whole sink run (docs/design.md, "The batch after an empty buffer"). It stops when a
# tick brings nothing new, the limit is reached, or after _FILL_MAX_S.
_FILL_TICK_S = 0.05
_FILL_MAX_S = 1.0


class ClusterMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``DataSourceStreamReader`` for a queue on every node of a broker cluster.

    Spark constructs this object in several Python processes (the long-lived driver runner,
    and short-lived planners that pickle it for executors). Only the runner ever calls the
    offset methods, so the consumer is created on first use there and never pickled.
    """

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._consumer: ClusterConsumer | None = None
        self._backlog: BacklogMonitor | None = None
        #: the next batch with rows is the first of a run or of a burst: let it fill (_fill)
        self._fill_next = True
        #: no latestOffset answered yet in this run: an empty buffer waits as long as a node
        #: may take to start delivering (the dialects' ``first_delivery_wait_s``)
        self._first_call = True
        apply_log_level()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_consumer"] = None
        state["_backlog"] = None
        return state

    def __repr__(self) -> str:
        names = ",".join(n.name for n in self.options.connection.nodes)
        return f"ClusterMQStreamReader(queue={self.options.connection.queue_names!r}, nodes={names})"

    @property
    def consumer(self) -> ClusterConsumer:
        if self._consumer is None:
            stop_in_order_on_sigterm()  # Spark ends this worker with SIGTERM: close in order
            keep_batches_out_of_the_heap()  # flat memory over a long drain
            consumer = ClusterConsumer(self.options)
            consumer.start()
            consumer.watch_stalls(self._depth_probe())
            self._consumer = consumer
        return self._consumer

    def _names(self) -> list[str]:
        """The offset keys: the consumer's nodes (with ``discovery=cluster`` the discovered
        ones, growing as nodes join), else ``brokers``."""
        if self._consumer is not None:
            return self._consumer.node_names
        return [n.name for n in self.options.connection.nodes]

    # --------------------------------------------------------------- offsets
    def initialOffset(self) -> NodeOffsets:
        self.consumer  # noqa: B018 - connect now: an unreachable cluster fails the query at start
        return make_offsets({}, self._names())

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger is not None:
            return ReadMaxRows(self.options.max_messages_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def _limits(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        if isinstance(limit, ReadMaxRows):
            return limit.max_rows, self.options.max_bytes_per_trigger
        if isinstance(limit, ReadMaxBytes):
            return self.options.max_messages_per_trigger, limit.max_bytes
        return None, None  # ReadAllAvailable (and limits this source does not implement)

    def latestOffset(self, start: dict, limit: ReadLimit) -> NodeOffsets:
        consumer = self.consumer
        joined = consumer.admit()
        if joined:
            log.info("clustermq: reading from node(s) %s that joined the cluster, from offset 0",
                     ", ".join(joined))
        begin = parse_offsets(start, self._names())
        consumer.set_start(begin)
        consumer.acknowledge(begin)
        consumer.check_reachable()
        max_messages, max_bytes = self._limits(limit)
        end = consumer.latest(begin, max_messages, max_bytes)
        if end == begin:
            self._fill_next = True
            consumer.wait_for_arrival(consumer.first_delivery_wait_s if self._first_call else _EMPTY_POLL_S)
            end = consumer.latest(begin, max_messages, max_bytes)
        self._first_call = False
        while end == begin and consumer.available_now_pending(begin):
            consumer.check_reachable()
            consumer.wait_for_arrival(0.5)
            end = consumer.latest(begin, max_messages, max_bytes)
        if end != begin and self._fill_next:
            self._fill_next = False
            end = self._fill(begin, end, max_messages, max_bytes)
        return end

    def _fill(self, begin: NodeOffsets, end: NodeOffsets, max_messages: int | None,
              max_bytes: int | None) -> NodeOffsets:
        """Let a batch that began with the first deliveries grow while they keep arriving."""
        consumer = self.consumer
        deadline = time.monotonic() + _FILL_MAX_S
        while time.monotonic() < deadline:
            seen = consumer.arrivals_so_far()
            time.sleep(_FILL_TICK_S)
            if consumer.arrivals_so_far() == seen:
                break
            grown = consumer.latest(begin, max_messages, max_bytes)
            if grown == end:  # the limit (or AvailableNow's target) is reached
                break
            end = grown
        return end

    def reportLatestOffset(self) -> dict[str, NodeLag] | None:
        """Per node: the next offset, and the lag behind it (:mod:`clustermq.read.lag`)."""
        if self._consumer is None:
            return None
        if self._backlog is None:
            self._backlog = BacklogMonitor(self._backlog_probe())
            self._backlog.start()
        return lag_report(self._consumer.status(), self._backlog.depths())

    def _depth_probe(self) -> Callable[[], QueueDepths]:
        def probe() -> QueueDepths:
            conn = self.options.connection
            if self._consumer is not None:  # the nodes read from, discovered ones included
                conn = dataclasses.replace(conn, nodes=tuple(s.node for s in self._consumer.subscriptions))
            return connection_depths(conn)

        return probe

    def _backlog_probe(self) -> Callable[[], QueueDepths]:
        """The depth probe of the lag report, which asks no node when none can tell
        (``ClusterConsumer.depth_untold``). AvailableNow's probe still asks them all, since an
        unknown depth must keep it reading."""
        depths = self._depth_probe()

        def probe() -> QueueDepths:
            if self._consumer is not None and self._consumer.depth_untold():
                return QueueDepths(self.options.connection.queue)
            return depths()

        return probe

    def prepareForTriggerAvailableNow(self) -> None:
        probe = self._depth_probe()
        depths = probe()
        unknown = [name for name, depth in depths.items() if depth is None]
        if unknown:
            log.warning("clustermq: queue depth unknown on %s; AvailableNow reads what arrives "
                        "until availableNowIdleTimeout", ", ".join(unknown))
        backlog = sum(d for d in depths.values() if d)
        if unknown:
            backlog = max(backlog, 1 << 62)
        self.consumer.prepare_available_now(backlog, probe)

    # --------------------------------------------------------------- batches
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        names = self._names()
        begin, finish = parse_offsets(start, names), parse_offsets(end, names)
        if begin == finish:
            return []
        consumer = self.consumer
        consumer.set_start(begin)
        taken = consumer.take(begin, finish)
        return plan_partitions(consumer, taken, consumer.options)  # numPartitions: discovered

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, MessagesPartition)
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        if self._consumer is not None:
            self._consumer.acknowledge(parse_offsets(end, self._names()))

    def stop(self) -> None:
        if self._backlog is not None:
            self._backlog.stop()
            self._backlog = None
        if self._consumer is not None:
            self._consumer.stop()
            self._consumer = None
