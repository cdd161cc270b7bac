"""What every browse shares: rows handed to Spark in bounded Arrow batches, and the check that a
node's snapshot holds what its queue held.

A browser is told nothing about what it did not see: Classic cuts a STOMP browse at
``maxBrowsePageSize``, and an AMQP browse ends on a quiet link. So each browse counts what it
saw against the node's queue depth measured before and after; fewer than the smaller of the two
means a partial snapshot, which fails the read instead of passing for the whole queue.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from clustermq.broker.depth import queue_depth
from clustermq.broker.dialect import BrokerDialect
from clustermq.broker.nodes import Node
from clustermq.errors import BrowseIncomplete
from clustermq.options import ReadOptions
from clustermq.read.messages import BufferedMessage
from clustermq.read.schema import to_record_batch

log = logging.getLogger("clustermq.browse")

#: rows per Arrow batch handed to Spark: bounds executor memory for deep queues
CHUNK = 5000


def node_depth(node: Node, options: ReadOptions) -> int | None:
    """The queue's depth on ``node``; ``None`` (logged) when the node cannot tell."""
    username, password = options.connection.login
    try:
        return queue_depth(node, options.connection.queue, username, password,
                           options.connection.connect_timeout_s)
    except Exception as exc:
        log.warning("node %s: queue depth unknown (%s); cannot check the browse is complete",
                    node.name, exc)
        return None


def check_complete(node: Node, seen: int, depth_before: int | None, options: ReadOptions,
                   why_short: str) -> None:
    """Raise :class:`BrowseIncomplete` (ending with ``why_short``) when ``seen`` is below the
    node's depth before and after the browse. Not with a selector: the depth counts every
    message, and a browse that shows fewer is the selection."""
    depth_after = node_depth(node, options)
    known = [d for d in (depth_before, depth_after) if d is not None and not options.selector]
    if known and seen < min(known):
        raise BrowseIncomplete(
            f"broker node {node.name}: the browse of '{options.connection.queue}' returned {seen} "
            f"messages but the queue holds {min(known)} there: {why_short}")
    log.info("node %s: browsed %d messages of %s (depth %s before, %s after)", node.name, seen,
             options.connection.queue, depth_before, depth_after)


def snapshot_batch(node: Node, messages: list[BufferedMessage], dialect: BrokerDialect,
                   group_header: str, delivery_count: bool = False) -> pa.RecordBatch:
    """Browsed messages as one Arrow batch of the reader's schema."""
    batch, _ = to_record_batch(node.name, messages, dialect, group_header, delivery_count)
    return batch
