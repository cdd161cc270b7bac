"""One node's subscription: a connection, a bounded buffer, and reconnection with back-off.

The connection is a link of the ``transport`` option (read/links.py: STOMP, or AMQP 1.0 by
choice); everything here is the same for both. Lives only in the driver-side reader process (see
docs/design.md). A link's receiving thread only appends to the buffer; acknowledgements are
sent from the caller's thread (Spark's ``latestOffset``/``commit``), never from the receiver
thread, which deadlocked in a measurement (stomp.py).

Sequence numbers: every delivered message gets the node's next delivery counter value. The
counter's starting point (``base``) is unknown until Spark names a start offset; messages that
arrive before that wait in ``_unnumbered``. Offsets up to ``reserved_end`` were handed to Spark
and may still be asked for by ``partitions``; everything from there on is ours to drop when a
connection is lost (the broker gives those messages back and redelivers them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Protocol

import stomp

from clustermq.broker.dialect import BrokerDialect
from clustermq.broker.nodes import Node
from clustermq.errors import NodeUnavailable
from clustermq.options import ReadOptions
from clustermq.read.copies import RecentIds
from clustermq.read.links import Link, LinkOpener, LinkOwner
from clustermq.read.messages import BufferedMessage, NodeStatus
from clustermq.read.stomp_link import open_stomp_link

log = logging.getLogger("clustermq.subscription")


class ArrivalNumbers(Protocol):
    """Where a delivery's arrival number comes from: shared by every node of the reader."""

    def __next__(self) -> int: ...


def open_transport_link(owner: LinkOwner, generation: int) -> Link:
    """A link of the ``transport`` option; proton is imported only where AMQP is asked for."""
    if owner.options.transport == "amqp":
        from clustermq.read.amqp_link import open_amqp_link

        return open_amqp_link(owner, generation)
    return open_stomp_link(owner, generation)


class NodeSubscription:
    """The query's competing consumer on one node; the owner of its links (read/links.py)."""
    paused = False  # a priority backup reading nothing while a preferred node is up (priority.py)

    def __init__(
        self,
        node: Node,
        index: int,
        options: ReadOptions,
        arrivals: ArrivalNumbers,
        on_dropped: Callable[[int], None],
        recent: RecentIds | None = None,
        *,
        open_link: LinkOpener = open_transport_link,
    ) -> None:
        self.node = node
        self.index = index
        self.options = options
        self.dialect: BrokerDialect | None = None
        self._arrivals = arrivals
        # deliveries that do not count towards AvailableNow's backlog (given back, or copies)
        self._on_dropped = on_dropped
        self._recent = recent if recent is not None else RecentIds()
        self._open_link = open_link
        self._lock = threading.Condition()
        self._conn: Link | None = None
        self._generation = 0
        self._connected = False
        self._lost = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._unnumbered: list[BufferedMessage] = []
        self._messages: deque[BufferedMessage] = deque()
        self.base: int | None = None
        self.next_seq: int | None = None
        self.reserved_end: int | None = None
        self.acked_upto: int | None = None
        self.reconnects = 0
        self.last_error: str | None = None
        self.last_arrival = time.monotonic()
        self.last_connected = 0.0
        self.lost_at: float | None = None
        self.departed = False  # not reconnecting: the cluster no longer lists it (membership.py)
        self._relisted = False  # departed, then listed again: the next attempt is due now
        self._wake = threading.Event()

    # ------------------------------------------------------------------ connection
    def connect_once(self) -> None:
        """One connection attempt (a link of the ``transport`` option unless ``open_link`` says
        otherwise); raises :class:`NodeUnavailable`."""
        with self._lock:
            self._generation += 1
            generation = self._generation
        link = self._open_link(self, generation)
        with self._lock:
            self.dialect = link.dialect
            self._conn = link
            self._connected = True
            self._lost.clear()
            self.last_connected = time.monotonic()
            self.last_error = None
        log.info("subscribed to %s on node %s (%s, %s)", self.options.connection.queue_names,
                 self.node.name, link.dialect.name, self.options.transport)

    def start(self) -> None:
        """Run the reconnect supervisor; the first attempt was made by the caller."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._supervise, name=f"clustermq-node-{self.index}", daemon=True
            )
            self._thread.start()

    def _supervise(self) -> None:
        next_delay = self.options.connection.reconnect.delays()
        while not self._stopping.is_set():
            if self._connected and not self.paused:
                self._lost.wait(1.0)
                continue
            if self._connected or self.paused:
                self._stopping.wait(1.0)
                continue
            if self.departed:
                self._wake.wait(1.0)  # set_departed(False) and stop() end the wait at once
                if self.departed:  # the flags carry the news; the event only cuts waits short
                    self._wake.clear()
                continue
            if not self._relisted:
                self._wake.wait(next_delay())  # stop() and a relisting cut the back-off short
                self._wake.clear()
                if self._stopping.is_set():
                    return
            if self._relisted:
                self._relisted = False
                self._wake.clear()
                next_delay = self.options.connection.reconnect.delays()
            if self.departed:  # departed during the wait: not retried until listed again
                continue
            try:
                self.connect_once()
            except (NodeUnavailable, OSError, stomp.exception.StompException) as exc:
                self.note_error(str(exc))
                log.warning("node %s still unreachable, next attempt in <= %.1f s: %s",
                            self.node.name, self.options.connection.reconnect.max_delay_s, exc)
                continue
            self.reconnects += 1
            # WARNING like the loss itself, so the default log shows both ends of an outage.
            down_s = time.monotonic() - self.lost_at if self.lost_at is not None else 0.0
            log.warning("reconnected to node %s after %.1f s (reconnect %d)",
                        self.node.name, down_s, self.reconnects)
            next_delay = self.options.connection.reconnect.delays()

    def set_departed(self, gone: bool) -> None:
        """Membership's verdict (membership.py). A node the cluster lists again is up (its peers
        reach it), so it is tried at once and its back-off starts over: waiting out the delay
        its outage had grown to (up to ``maxReconnectDelay``) left its messages unread that
        long (docs/broker-behaviour.md, "A group pinned to a bridge that may not carry its
        message")."""
        relisted = self.departed and not gone
        self.departed = gone  # before the wake: the woken supervisor must see it
        if relisted:
            self._relisted = True
            self._wake.set()

    # ------------------------------------------------------------------ what a link reports
    def set_dialect(self, dialect: BrokerDialect) -> None:
        """The node's dialect, before the first delivery (whose copy check needs it)."""
        self.dialect = dialect

    def note_error(self, message: str) -> None:
        self.last_error = message

    def link_lost(self, generation: int, reason: str) -> None:
        """Called from the link's thread: forget what was not handed to Spark yet."""
        with self._lock:
            if generation != self._generation or not self._connected:
                return
            self._connected = False
            self._generation += 1  # frames still in flight on the old connection are late
            self.lost_at = time.monotonic()
            conn, self._conn = self._conn, None
            dropped = self._drop_unreserved()
            self._lock.notify_all()
        log.warning("lost node %s (%s); %d unplanned messages given back to the broker",
                    self.node.name, reason, dropped)
        self._on_dropped(dropped)
        self._lost.set()
        if conn is not None:
            threading.Thread(target=conn.close, daemon=True).start()

    def resubscribe(self, reason: str) -> bool:
        """Re-open this node's connection if it holds nothing Spark still needs; True if it did.

        A Classic network of brokers sometimes stops dispatching to a consumer that has room
        while the node still holds messages (docs/broker-behaviour.md, "Dispatch stalls with
        many groups"); a consumer that connects afresh gets them at once. Only done when every delivered message was
        acknowledged, so it cannot produce a duplicate.
        """
        return self._close_if(lambda: not self._messages and not self._unnumbered, reason)

    def close_if_settled(self, reason: str) -> bool:
        """Close the connection like a lost one if everything handed to Spark is acknowledged;
        True if it did (a paused priority backup: closing earlier would give back messages a
        running batch emits, i.e. duplicates)."""
        return self._close_if(lambda: self.reserved_end is None or (
            self.acked_upto is not None and self.acked_upto >= self.reserved_end), reason)

    def _close_if(self, idle: Callable[[], bool], reason: str) -> bool:
        with self._lock:
            if not self._connected or not idle():
                return False
            generation = self._generation
        self.link_lost(generation, reason)
        return True

    def _drop_unreserved(self) -> int:
        given_back = list(self._unnumbered)
        self._unnumbered.clear()
        if self.reserved_end is not None:
            while self._messages and self._messages[-1].seq >= self.reserved_end:
                given_back.append(self._messages.pop())
            self.next_seq = max(self.reserved_end, self._messages[-1].seq + 1 if self._messages else 0)
        self._recent.forget(self.message_key(m.headers) for m in given_back)
        return len(given_back)

    def stop(self) -> None:
        """Close the connection; what was handed to Spark and not acknowledged is closed as a
        failed delivery where the transport can say so (Link.close)."""
        self._stopping.set()
        self._wake.set()
        with self._lock:
            conn, self._conn = self._conn, None
            self._connected = False
            handed = [m for m in self._messages
                      if self.reserved_end is not None and m.seq < self.reserved_end
                      and m.generation == self._generation]
        if conn is not None:
            conn.close(handed)

    @property
    def connected(self) -> bool:
        return self._connected

    # ------------------------------------------------------------------ buffer
    def deliver(self, headers: dict[str, str], body: bytes, ack_id: str | None, generation: int,
                slot: int | None = None) -> None:
        """One delivery of a link of ``generation`` (called from the link's own thread)."""
        message = BufferedMessage(headers=headers, body=body, ack_id=ack_id, generation=generation,
                                  arrival=next(self._arrivals), slot=slot)
        with self._lock:
            late = generation != self._generation
            if not late:
                # Told before the message is buffered, so no batch can emit it unflagged.
                message.copy = self._recent.seen_before(self.message_key(headers))
                if self.next_seq is None:
                    self._unnumbered.append(message)
                else:
                    message.seq = self.next_seq
                    self.next_seq += 1
                    self._messages.append(message)
                self.last_arrival = time.monotonic()
                self._lock.notify_all()
        if late:  # a frame of a dropped connection: the broker redelivers it, count it again
            self._on_dropped(1)
        elif message.copy:
            self._on_dropped(1)  # a copy of a message already delivered (read/copies.py)

    def message_key(self, headers: dict[str, str]) -> str | None:
        """The id a copy of the message shares with it (read/copies.py)."""
        dialect = self.dialect
        return dialect.message_id(headers, self.node.name) if dialect is not None else None

    def set_base(self, start: int) -> None:
        """Number the stream from ``start`` (the first offset Spark names for this node)."""
        with self._lock:
            if self.base is not None:
                return
            self.base = start
            self.next_seq = start
            self.reserved_end = start
            self.acked_upto = start
            for message in self._unnumbered:
                message.seq = self.next_seq
                self.next_seq += 1
                self._messages.append(message)
            self._unnumbered.clear()

    def available(self, start: int, cap_arrival: int | None = None) -> list[int]:
        """Body sizes of buffered messages from ``start`` on (optionally only arrivals < cap)."""
        with self._lock:
            sizes = []
            for message in self._messages:
                if message.seq < start:
                    continue
                if cap_arrival is not None and message.arrival >= cap_arrival:
                    break
                sizes.append(message.size)
            return sizes

    def reserve(self, end: int) -> None:
        """Offsets below ``end`` were handed to Spark: keep them across a lost connection."""
        with self._lock:
            if self.reserved_end is None or end > self.reserved_end:
                self.reserved_end = end

    def take(self, start: int, end: int, wait_s: float) -> list[BufferedMessage]:
        """Messages with ``start <= seq < end``; a replay after a restart waits for redelivery.

        If the brokers cannot redeliver enough within ``wait_s`` (another consumer took them),
        the rest of the range is skipped, so a later message can never be numbered inside a
        range Spark has already planned (it would be acknowledged without being emitted).
        """
        deadline = time.monotonic() + wait_s
        with self._lock:
            while (self.next_seq is None or self.next_seq < end) and not self._stopping.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(min(remaining, 0.5))
            if self.next_seq is not None and self.next_seq < end:
                log.warning(
                    "node %s: replay of offsets [%d, %d) got only %d messages in %.0f s; "
                    "the rest were consumed elsewhere or not redelivered yet",
                    self.node.name, start, end, self.next_seq - start, wait_s)
                self.next_seq = end
            if self.reserved_end is None or end > self.reserved_end:
                self.reserved_end = end
            return [m for m in self._messages if start <= m.seq < end]

    def acknowledge(self, upto: int) -> int:
        """Acknowledge every message below ``upto``; cumulative and idempotent.

        Messages that arrived on an earlier connection cannot be acknowledged (an ACK must travel
        on the receiving connection); the broker already took them back and redelivers them.
        """
        with self._lock:
            if self.acked_upto is None or upto <= self.acked_upto:
                return 0
            done: list[BufferedMessage] = []
            while self._messages and self._messages[0].seq < upto:
                done.append(self._messages.popleft())
            self.acked_upto = upto
            conn = self._conn
            generation = self._generation
        current = [m for m in done if m.generation == generation and m.ack_id]
        if not current or conn is None:
            return 0
        try:
            conn.ack(current)
        except Exception as exc:
            log.warning("node %s: ACK failed (%s); %d messages will be redelivered",
                        self.node.name, exc, len(current))
            return 0
        return len(current)

    def status(self) -> NodeStatus:
        with self._lock:
            return NodeStatus(
                node=self.node.name,
                connected=self._connected,
                buffered=len(self._messages) + len(self._unnumbered),
                next_seq=self.next_seq, acked_upto=self.acked_upto,
                reconnects=self.reconnects,
                last_error=self.last_error, departed=self.departed,
            )

    def __iter__(self) -> Iterator[BufferedMessage]:
        with self._lock:
            return iter(list(self._messages))
