"""A node subscription's STOMP connection (the default ``transport``): subscribe, deliver, ACK, close.

One of the two link kinds behind :class:`~clustermq.read.subscription.NodeSubscription` (the
other is :mod:`clustermq.read.amqp_link`); the subscription keeps the numbering, the buffer and
the reconnects, a link only moves messages and acknowledgements over its wire. stomp.py calls
the :class:`Receiver` on its receiver thread, which only hands deliveries over (each with its
group slot, read/slots.py); acknowledgements are sent from the caller's thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from clustermq.broker.connection_options import TopicSubscription
from clustermq.broker.dialect import BrokerDialect
from clustermq.broker.frames import body_bytes, error_text, message_headers
from clustermq.broker.listener import StompListener
from clustermq.broker.selector_check import selector_headers
from clustermq.broker.session import NodeSession, open_node
from clustermq.broker.stomp_connection import HEARTBEAT_RECEIVE_SCALE
from clustermq.options import ReadOptions
from clustermq.read.links import LinkOwner
from clustermq.read.messages import BufferedMessage
from clustermq.read.slots import last_per_slot, queue_link_id, slot_count, slot_ids, slot_prefetch

log = logging.getLogger("clustermq.subscription")


class Receiver(StompListener):
    """stomp.py's callbacks for one connection (one ``generation``): deliveries, losses, ERRORs.

    Remembers when the node last sent anything, so a loss can be told apart: stomp.py's
    heart-beat thread closes the socket *before* it calls ``on_heartbeat_timeout``, and the
    receiver thread usually reports ``on_disconnected`` first (measured: every stall in the
    network-fault test was reported as "connection lost").
    """

    def __init__(self, owner: LinkOwner, generation: int) -> None:
        super().__init__()
        self.owner = owner
        self.generation = generation
        self.heartbeat_s = owner.options.connection.heartbeat_ms / 1000
        #: STOMP subscription id -> group slot; filled before the first SUBSCRIBE
        self.slots: dict[str, int | None] = {}
        self.last_frame = time.monotonic()

    def _why(self, default: str) -> str:
        silent = time.monotonic() - self.last_frame
        if self.heartbeat_s and silent >= 0.95 * self.heartbeat_s * HEARTBEAT_RECEIVE_SCALE:
            return f"heart-beat timeout: nothing received for {silent:.1f} s"
        return default

    def on_connected(self, frame: Any) -> None:
        self.last_frame = time.monotonic()
        super().on_connected(frame)

    def on_heartbeat(self) -> None:
        self.last_frame = time.monotonic()

    def on_receipt(self, frame: Any) -> None:
        self.last_frame = time.monotonic()
        super().on_receipt(frame)

    def on_message(self, frame: Any) -> None:
        self.last_frame = time.monotonic()
        self.owner.deliver(message_headers(frame.headers), body_bytes(frame), frame.headers.get("ack"),
                           self.generation, self.slots.get(frame.headers.get("subscription", "")))

    def on_disconnected(self) -> None:
        super().on_disconnected()
        self.owner.link_lost(self.generation, self._why("connection lost"))

    def on_heartbeat_timeout(self) -> None:
        super().on_heartbeat_timeout()
        self.owner.link_lost(self.generation, self._why("heart-beat timeout"))

    def on_error(self, frame: Any) -> None:
        self.last_frame = time.monotonic()
        super().on_error(frame)
        message = error_text(frame)
        log.error("node %s sent ERROR: %s", self.owner.node.name, message)
        self.owner.note_error(message)


class StompLink:
    """One STOMP connection of a node's subscription, with its group slots' subscriptions."""

    def __init__(self, session: NodeSession, ack_mode: str) -> None:
        self.session = session
        self.ack_mode = ack_mode

    @property
    def dialect(self) -> BrokerDialect:
        return self.session.dialect

    def ack(self, messages: list[BufferedMessage]) -> None:
        """``client``: one cumulative ACK per slot; ``client-individual``: one per message."""
        for message in last_per_slot(messages) if self.ack_mode == "client" else messages:
            self.session.conn.ack(message.ack_id)

    def close(self, failed: Sequence[BufferedMessage] = ()) -> None:
        """Close without acknowledging: unacknowledged messages go back to the broker.

        STOMP has no outcome for a failed delivery (a NACK is a poison acknowledgement that
        Classic dead-letters at once), so ``failed`` go back like the rest; what each broker
        counts of them is in docs/broker-behaviour.md."""
        self.session.close()


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


def open_stomp_link(owner: LinkOwner, generation: int) -> StompLink:
    """Connect ``owner``'s node and subscribe (one subscription per group slot); raises
    :class:`~clustermq.errors.NodeUnavailable`."""
    options = owner.options
    receiver = Receiver(owner, generation)
    topic = options.connection.topic
    session = open_node(owner.node, options.connection, receiver,
                        client_id=topic.client_id if topic is not None else None)
    try:
        dialect = session.dialect
        owner.set_dialect(dialect)  # deliveries start before subscribe() returns
        if topic is not None:
            subscribe_topic(session, receiver, owner.index, options, topic)
            return StompLink(session, options.ack_mode)
        slots = slot_ids(owner.index, slot_count(dialect, options.num_partitions))
        queues = options.connection.queues
        # one subscription per group slot (several where the broker hides groups) and queue;
        # the node's prefetch window is shared between the queues as between the slots
        subscriptions = [(queue_link_id(sub_id, j, len(queues)), slot, queue)
                         for j, queue in enumerate(queues) for sub_id, slot in slots.items()]
        receiver.slots = {sub_id: slot for sub_id, slot, _ in subscriptions}
        for k, (sub_id, _slot, queue) in enumerate(subscriptions):
            session.conn.subscribe(destination=dialect.destination(queue), id=sub_id, ack=options.ack_mode,
                                   headers={**flow_control(options, dialect, len(subscriptions), k),
                                            **selector_headers(options.selector)})
    except Exception:
        session.close()
        raise
    return StompLink(session, options.ack_mode)


def subscribe_topic(session: NodeSession, receiver: Receiver, index: int, options: ReadOptions,
                    topic: TopicSubscription) -> None:
    """One subscription to ``topic`` on the node, or none where the broker keeps a topic's
    subscription on the first node only: that node's connection then stays open and idle, so
    the node still counts as reachable and keeps its offset."""
    dialect = session.dialect
    if index != 0 and not dialect.topic_on_every_node:
        log.info("node %s: %s keeps the subscription to topic '%s' on the first node; not subscribing here",
                 session.node.name, dialect.product, topic.topic)
        return
    sub_id = next(iter(slot_ids(index, 1)))
    receiver.slots = {sub_id: None}
    destination, headers = dialect.topic_subscription(topic)
    session.conn.subscribe(destination=destination, id=sub_id, ack=options.ack_mode,
                           headers={**flow_control(options, dialect, 1), **headers})
