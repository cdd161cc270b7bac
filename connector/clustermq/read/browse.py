"""Batch read (``spark.read.format("clustermq")``): a browse snapshot of every node's queues.

A queue browser (ActiveMQ Classic: STOMP ``SUBSCRIBE`` with ``browser:true``; the broker ends
the listing with a MESSAGE carrying ``browser:end``) sees the messages without consuming them,
so the read leaves every queue as it was. Unlike the streaming reader, nothing has to be
acknowledged after a commit, so each executor task opens its own connection: one partition per
node and queue, in parallel, with no driver-side state.

What a browse cannot promise, and how the read guards against it:

* Classic hands a browser at most ``maxBrowsePageSize`` messages of a destination (default
  400; measured: 400 of 2,200) and no more than fit in its memory limit. The task compares the
  number browsed with the node's queue depth measured before and after the browse; fewer than
  the smaller of the two means the broker cut the listing, and the read fails with an error that
  names the broker setting and the drain export, instead of returning a silently partial
  "snapshot".
* Artemis has no STOMP browse: with ``transport=amqp`` the read browses over AMQP 1.0 instead
  (read/amqp_browse.py, on both brokers); over STOMP it fails at planning, pointing there and to
  the drain export.
* Messages that producers add or consumers take during the browse may or may not be seen: the
  snapshot is per node and not atomic across nodes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from clustermq.broker.dialect import BrokerDialect, configured_dialect
from clustermq.broker.frames import body_bytes, message_headers
from clustermq.broker.listener import BROKER_ERROR, Inbox
from clustermq.broker.nodes import Node
from clustermq.broker.selector_check import check_selector, selector_headers
from clustermq.broker.session import first_answering_node, open_node
from clustermq.errors import BrowseRefused, BrowseTimeout, LinkLost, NodeUnavailable
from clustermq.options import OptionError, ReadOptions
from clustermq.read.messages import BufferedMessage
from clustermq.read.snapshot import CHUNK, check_complete, node_depth, snapshot_batch

log = logging.getLogger("clustermq.browse")

DRAIN_HINT = (
    "browse it over AMQP 1.0 instead (options transport=amqp and amqpBrokers), or export the "
    "backlog by draining it: python -m clustermq.jobs.export_backlog --mode drain "
    "(a streaming read with Trigger.AvailableNow, acknowledged on commit)"
)


class NodePartition(InputPartition):
    """One node's browse of one queue: the node's position in the ``brokers`` list, the queue."""

    def __init__(self, index: int, node_name: str, queue: str, number: int) -> None:
        super().__init__(number)
        self.index = index
        self.node_name = node_name
        self.queue = queue

    def __repr__(self) -> str:
        return f"NodePartition({self.index}, {self.node_name}, {self.queue})"


def one_queue(options: ReadOptions, queue: str) -> ReadOptions:
    """``options`` narrowed to ``queue``: a browse reads one queue of one node at a time."""
    return dataclasses.replace(options, connection=dataclasses.replace(options.connection, queues=(queue,)))


def check_browse_mode(options: ReadOptions) -> None:
    """Refuse what a batch read cannot do, before any task runs."""
    if options.connection.is_topic:
        raise OptionError(
            "option 'topic': a batch read browses a queue's backlog, and a topic keeps none for it "
            "to browse; read a topic with a streaming query (readStream, Trigger.AvailableNow to "
            "read what its subscription holds and stop)")
    if options.mode == "drain":
        raise OptionError(
            "option 'mode': a batch read cannot drain a queue (nothing would acknowledge the "
            f"messages after they are safely written); {DRAIN_HINT}"
        )
    dialect = configured_dialect(options.connection.flavor)
    if dialect is not None and options.transport != "amqp":
        dialect.check_browse(DRAIN_HINT)


class ClusterMQBatchReader(DataSourceReader):
    """``spark.read.format("clustermq")``: browse every node; one partition per node."""

    def __init__(self, options: ReadOptions) -> None:
        check_browse_mode(options)
        self.options = options

    def __repr__(self) -> str:
        return f"ClusterMQBatchReader(queue={self.options.connection.queue_names!r})"

    def partitions(self) -> Sequence[InputPartition]:
        """One partition per node, once a node answered: with ``flavor=auto`` it says which
        broker the cluster runs; in any case a cluster none of whose nodes answers fails here,
        with every node and why (:class:`NoNodeReachable`), not in one task with one node."""
        dialect = detect_cluster_dialect(self.options)
        if configured_dialect(self.options.connection.flavor) is None and self.options.transport != "amqp":
            dialect.check_browse(DRAIN_HINT, where="the cluster: ")
        dialect.check_queue_patterns(self.options.connection.queues, where="the cluster: ")
        if self.options.selector:
            check_selector(self.options.connection, self.options.selector,
                           f"to check the selector of the batch read of queue '{self.options.connection.queue_names}'")
        queues = self.options.connection.queues
        return [NodePartition(i, n.name, q, i * len(queues) + j)
                for i, n in enumerate(self.options.connection.nodes) for j, q in enumerate(queues)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, NodePartition)
        node = self.options.connection.nodes[partition.index]
        options = one_queue(self.options, partition.queue)
        if self.options.transport == "amqp":  # a copy-mode receiver: both brokers browse so
            from clustermq.read.amqp_browse import browse_node_amqp  # proton: an optional extra

            return browse_node_amqp(node, partition.index, options)
        return browse_node(node, partition.index, options)


def detect_cluster_dialect(options: ReadOptions) -> BrokerDialect:
    """The dialect of the first node that answers (all nodes of a cluster are one product);
    :class:`NoNodeReachable` naming every node and why when none does."""
    with first_answering_node(options.connection.nodes, options.connection,
                              f"for the batch read of queue '{options.connection.queue_names}'") as session:
        return session.dialect


def browse_node(node: Node, index: int, options: ReadOptions) -> Iterator[pa.RecordBatch]:
    """Every message of ``queue`` on ``node``, as record batches; the queue is left unchanged.

    ``sequence`` is the message's position in the node's browse (0, 1, ...).
    """
    conn_options = options.connection
    depth_before = node_depth(node, options)
    browser = Inbox()
    with open_node(node, conn_options, browser, "clustermq-browse") as session:
        dialect = session.dialect
        dialect.check_browse(DRAIN_HINT, where=f"broker node {node.name}: ")
        session.conn.subscribe(
            destination=dialect.destination(conn_options.queue),
            id=f"clustermq-browse-{index}",
            ack="auto",
            headers={**dialect.browse_headers(), **selector_headers(options.selector)},
        )
        seen = 0
        chunk: list[BufferedMessage] = []
        while True:
            try:
                frame = browser.next(options.browse_idle_timeout_s)
            except LinkLost:
                if browser.reason.startswith(BROKER_ERROR):
                    raise BrowseRefused(f"broker node {node.name} refused the browse: {browser.error}") from None
                raise NodeUnavailable(node, f"connection lost during the browse, after {seen} messages") from None
            if frame is None:
                raise BrowseTimeout(
                    f"broker node {node.name}: browse of '{conn_options.queue}' received nothing "
                    f"for {options.browse_idle_timeout_s:.0f} s after {seen} messages "
                    "(option browseIdleTimeout)"
                )
            if dialect.browse_ended(frame.headers):
                break
            chunk.append(BufferedMessage(headers=message_headers(frame.headers), body=body_bytes(frame),
                                         ack_id=None, generation=0, arrival=seen, seq=seen))
            seen += 1
            if len(chunk) >= CHUNK:
                yield snapshot_batch(node, chunk, dialect, conn_options.group_id_header)
                chunk = []
        if chunk:
            yield snapshot_batch(node, chunk, dialect, conn_options.group_id_header)
    check_complete(node, seen, depth_before, options,
                   "ActiveMQ Classic shows a browser at most maxBrowsePageSize messages per "
                   "destination (default 400) and no more than fit in its memory limit. Raise "
                   "maxBrowsePageSize in the broker's destination policy (the local cluster's "
                   f"Classic template sets 100000), or {DRAIN_HINT}")
