"""A node subscription's STOMP connection (the default ``transport``): subscribe, ACK, close.

One of the two link kinds behind :class:`~clustermq.read.subscription.NodeSubscription` (the
other is :mod:`clustermq.read.amqp_link`); the subscription keeps the numbering, the buffer and
the reconnects, a link only moves messages and acknowledgements over its wire.
"""

from __future__ import annotations

import stomp

from clustermq.broker.connection import close_connection, open_connection
from clustermq.broker.dialect import BrokerDialect, resolve_dialect
from clustermq.options import ReadOptions
from clustermq.read.links import LinkOwner
from clustermq.read.messages import BufferedMessage
from clustermq.read.receiver import Receiver
from clustermq.read.slots import last_per_slot, slot_count, slot_ids, slot_prefetch


class StompLink:
    """One STOMP connection of a node's subscription, with its group slots' subscriptions."""

    def __init__(self, conn: stomp.Connection12, dialect: BrokerDialect, ack_mode: str) -> None:
        self.conn = conn
        self.dialect = dialect
        self.ack_mode = ack_mode

    def ack(self, messages: list[BufferedMessage]) -> None:
        """``client``: one cumulative ACK per slot; ``client-individual``: one per message."""
        for message in last_per_slot(messages) if self.ack_mode == "client" else messages:
            self.conn.ack(message.ack_id)

    def close(self) -> None:
        """Close without acknowledging: unacknowledged messages go back to the broker."""
        close_connection(self.conn)


def flow_control(options: ReadOptions, dialect: BrokerDialect, slots: int, slot: int | None = None) -> dict[str, str]:
    """SUBSCRIBE headers that let a node deliver ``prefetchPerNode`` messages ahead of acks.

    Where the broker counts bytes, the dialect sizes its window from the expected message
    size: ``maxBytesPerTrigger / maxMessagesPerTrigger`` when both are set, else 1 KiB; and
    a byte-limited batch must fit.
    """
    body = 1024
    if options.max_bytes_per_trigger and options.max_messages_per_trigger:
        body = max(64, options.max_bytes_per_trigger // options.max_messages_per_trigger)
    return dialect.subscribe_headers(slot_prefetch(options.prefetch_per_node, slots, slot), body_bytes=body,
                                     batch_bytes=options.max_bytes_per_trigger or 0)


def open_stomp_link(sub: LinkOwner, generation: int) -> StompLink:
    """Connect ``sub``'s node and subscribe (one subscription per group slot); raises
    :class:`~clustermq.errors.NodeUnavailable`."""
    options = sub.options
    receiver = Receiver(sub.node.name, generation, options.connection.heartbeat_ms,
                        sub._on_message, sub._on_lost, sub._note_error)
    conn, connected = open_connection(sub.node, options.connection, receiver)
    try:
        dialect = resolve_dialect(options.connection.flavor, connected.get("server"))
        sub.dialect = dialect  # deliveries start before subscribe() returns (_message_key)
        sub._slots = slot_ids(sub.index, slot_count(dialect, options.num_partitions))
        for sub_id, slot in sub._slots.items():  # several where the broker hides groups
            conn.subscribe(destination=dialect.destination(options.connection.queue), id=sub_id,
                           ack=options.ack_mode, headers=flow_control(options, dialect, len(sub._slots), slot))
    except Exception:
        close_connection(conn)
        raise
    return StompLink(conn, dialect, options.ack_mode)
