"""A node subscription's AMQP 1.0 link (opt-in ``transport=amqp``), with python-qpid-proton.

Why a second transport: over STOMP ActiveMQ Classic does not return a JMS producer's
``JMSXGroupID``, and Artemis gives an internal number as ``message-id``; over AMQP both show
the group (``group-id``) and the JMS message id. It costs several times the CPU per message on
the client and, on Classic, on the broker (docs/broker-behaviour.md), so STOMP stays the default.

Proton's reactor is single-threaded: each connection runs its own ``Container`` in a thread of
its own, which only hands deliveries to the subscription. Acknowledgements come from the
caller's thread (Spark's commit) as an injected event; the reactor thread then accepts and
settles the deliveries and grants as much credit again, so at most ``prefetchPerNode`` messages
are delivered and unsettled at any time, like STOMP's prefetch. Closing settles the messages
handed to Spark and not acknowledged as ``modified`` with ``delivery-failed`` (the broker counts
the delivery and redelivers the message, as for a JMS consumer that received it and closed
without acknowledging it) and leaves the rest unsettled: the broker takes them back uncounted,
like a JMS consumer's prefetch.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from typing import Any

from proton import Delivery, Handler
from proton.reactor import ApplicationEvent, Container, EventInjector

from clustermq.broker.dialect import BrokerDialect
from clustermq.broker.nodes import Node
from clustermq.broker.reachability import amqp_failure
from clustermq.errors import LinkLost, NodeUnavailable
from clustermq.read.amqp_attach import FailingReceiver, connect, connection_dialect, queue_source
from clustermq.read.amqp_message import message_fields
from clustermq.read.links import LinkOwner
from clustermq.read.messages import BufferedMessage
from clustermq.read.slots import queue_link_id, slot_prefetch

log = logging.getLogger("clustermq.subscription")

#: longest wait for the broker to answer the receiver's detach before the connection closes
DETACH_WAIT_S = 5.0


class AmqpLink(FailingReceiver):
    """One AMQP connection and receiver of a node's subscription, run by its own reactor."""

    def __init__(self, sub: LinkOwner, endpoint: Node, generation: int) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.sub = sub
        self.endpoint = endpoint
        self.generation = generation
        self._dialect: BrokerDialect | None = None
        self.ready = threading.Event()
        self.failure: str | None = None
        self._closing = False
        self._reported = False
        self._unsettled: dict[str, Delivery] = {}  # reactor thread only
        self._tags = 0
        self._to_settle: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
        self._to_fail: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
        self._injector = EventInjector()
        # the injector's pipe is closed with it and its descriptors may be reused at once:
        # nothing may be triggered after _shut (a lock, as callers are other threads)
        self._inject_lock = threading.Lock()
        self._injector_closed = False
        #: receiver name -> (its queue, the receiver): one per queue of option ``queue``
        self._receivers: dict[str, tuple[str, Any]] = {}
        self._attached: set[str] = set()
        self._detached: set[str] = set()
        self._link_of: dict[str, str] = {}  # delivery tag -> receiver name (reactor thread only)
        self._deadline: Any = None  # the timer of a detach awaiting its answer
        self._connection: Any = None
        self._container = Container(self)
        self._container.selectable(self._injector)
        self._thread = threading.Thread(target=self._run, name=f"clustermq-amqp-{sub.index}", daemon=True)

    @property
    def dialect(self) -> BrokerDialect:
        assert self._dialect is not None, "the AMQP connection is not open"
        return self._dialect

    # ------------------------------------------------------------------ caller's thread
    def start(self) -> None:
        self._thread.start()

    def ack(self, messages: list[BufferedMessage]) -> None:
        """Accept and settle ``messages`` in the reactor thread (an event is thread-safe)."""
        self._to_settle.put([m.ack_id for m in messages if m.ack_id])
        if not self._trigger("clustermq_settle"):
            raise LinkLost("the AMQP connection is closed")

    def close(self, failed: Sequence[BufferedMessage] = (), wait: bool = True) -> None:
        """Close without accepting anything (the broker redelivers what is unsettled), ``failed``
        settled as failed deliveries, waiting (bounded) until the connection is closed, as a
        STOMP DISCONNECT waits for its receipt: a process that exits right after would
        otherwise drop the last settlements unsent."""
        self._to_fail.put([m.ack_id for m in failed if m.ack_id])
        self._closing = True
        self._trigger("clustermq_close")
        if wait and self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(DETACH_WAIT_S + 1.0)

    def _trigger(self, name: str) -> bool:
        with self._inject_lock:
            if self._injector_closed:
                return False
            self._injector.trigger(ApplicationEvent(name))
            return True

    def _run(self) -> None:
        try:
            self._container.run()
        except Exception as exc:  # proton raises from handlers and I/O alike
            log.warning("node %s: AMQP reactor failed", self.sub.node.name, exc_info=True)
            reason = f"AMQP reactor failed: {type(exc).__name__}: {exc}"
            with self._inject_lock:  # nothing reads the injector any more
                self._injector_closed = True
            if not self.ready.is_set():
                self.failure = self.failure or reason
                self.ready.set()
            self._lost(reason)

    # ------------------------------------------------------------------ reactor thread
    def on_start(self, event: Any) -> None:
        self._connection = connect(event.container, self.endpoint, self.sub.options.connection)

    def on_connection_opened(self, event: Any) -> None:
        try:
            self._dialect = connection_dialect(event.connection, self.sub.options.connection.flavor)
        except ValueError as exc:
            self._fail(str(exc))
            return
        self.sub.set_dialect(self._dialect)  # deliveries may start as soon as credit is granted
        queues = self.sub.options.connection.queues
        for j, queue_name in enumerate(queues):
            address, options = queue_source(self._dialect, queue_name, self.sub.options.selector)
            name = queue_link_id(f"clustermq-{self.sub.index}", j, len(queues))
            self._receivers[name] = (queue_name, event.container.create_receiver(
                event.connection, address, name=name, options=options))

    def on_link_opened(self, event: Any) -> None:
        if event.receiver is None:  # proton wraps its objects afresh: not comparable by identity
            return
        if event.receiver.remote_source.address is None:  # attach refused: a detach follows
            return
        names = list(self._receivers)
        # the node's prefetch is shared between the queues' receivers, like STOMP's subscriptions
        event.receiver.flow(slot_prefetch(self.sub.options.prefetch_per_node, len(names),
                                          names.index(event.receiver.name)))
        self._attached.add(event.receiver.name)
        if len(self._attached) == len(names):
            self.ready.set()

    def on_message(self, event: Any) -> None:
        self._tags += 1
        tag = str(self._tags)
        self._unsettled[tag] = event.delivery  # event: Any, so never None here
        self._link_of[tag] = event.receiver.name
        queue_name = self._receivers[event.receiver.name][0]
        headers, body = message_fields(event.message, self.dialect.destination(queue_name))
        self.sub.deliver(headers, body, tag, self.generation)

    def on_clustermq_settle(self, event: Any) -> None:
        settled: dict[str, int] = {}
        while not self._to_settle.empty():
            for tag in self._to_settle.get():
                delivery = self._unsettled.pop(tag, None)
                name = self._link_of.pop(tag, None)
                if delivery is not None and name is not None:
                    delivery.update(Delivery.ACCEPTED)
                    delivery.settle()
                    settled[name] = settled.get(name, 0) + 1
        for name, count in settled.items():  # as much credit again, to the receiver it came on
            self._receivers[name][1].flow(count)

    def on_clustermq_close(self, event: Any) -> None:
        """Detach the receivers, then close the connection once the broker answered (or after
        ``DETACH_WAIT_S``): an orderly end in which the broker takes back only what is still
        unsettled. :meth:`close` waits for it (measured on Artemis: a close that did not wait,
        with the client's TCP path gone right after, left the last batch's 30 settled messages
        queued, delivery count 0)."""
        self._closing = True
        while not self._to_fail.empty():
            for tag in self._to_fail.get():
                delivery = self._unsettled.pop(tag, None)
                self._link_of.pop(tag, None)
                if delivery is not None:
                    delivery.local.failed = True
                    delivery.update(Delivery.MODIFIED)
                    delivery.settle()
        open_ = [r for _, r in self._receivers.values() if r.state & r.LOCAL_ACTIVE]
        if open_ and self.ready.is_set():
            for receiver in open_:
                receiver.close()
            self._deadline = self._container.schedule(DETACH_WAIT_S, _Deadline(self))
        else:
            self._shut()

    def on_link_closed(self, event: Any) -> None:
        """The broker answered a detach (on_clustermq_close): once it answered every one,
        close the connection."""
        if event.link is not None:
            self._detached.add(event.link.name)
        if self._detached >= set(self._receivers):
            self._shut()

    def on_connection_closing(self, event: Any) -> None:
        self._fail("connection closed by the broker")

    def on_connection_closed(self, event: Any) -> None:
        self._fail("connection closed")

    def on_link_closing(self, event: Any) -> None:
        self._fail("link closed by the broker")

    def _fail(self, reason: str) -> None:
        if not self.ready.is_set():
            self.failure = self.failure or reason
            self.ready.set()
        else:
            self._lost(reason)
        self._shut()

    def _lost(self, reason: str) -> None:
        if not self._closing and not self._reported:
            self._reported = True
            self.sub.link_lost(self.generation, reason)

    def detach_timed_out(self) -> None:
        """The broker did not answer the detach within ``DETACH_WAIT_S``: close anyway."""
        self._deadline = None
        self._shut()

    def _shut(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self._connection is not None and self._connection.state & self._connection.LOCAL_ACTIVE:
            self._connection.close()
        with self._inject_lock:
            if not self._injector_closed:
                self._injector_closed = True
                self._injector.close()


class _Deadline(Handler):
    """Closes the connection when the broker did not answer a detach in time."""

    def __init__(self, link: AmqpLink) -> None:
        self.link = link

    def on_timer_task(self, event: Any) -> None:
        self.link.detach_timed_out()


def open_amqp_link(sub: LinkOwner, generation: int) -> AmqpLink:
    """Connect ``sub``'s node over AMQP (the members of a pair in order) and attach a receiver
    with ``prefetchPerNode`` credit; raises :class:`NodeUnavailable`."""
    endpoint = sub.options.amqp_node(sub.node.name)
    timeout = sub.options.connection.connect_timeout_s
    failures = []
    for member in endpoint.members or (endpoint,):
        link = AmqpLink(sub, member, generation)
        link.start()
        arrived = link.ready.wait(timeout)
        if arrived and link.failure is None:
            return link
        link.close(wait=False)  # closing first: a failed attempt reports no loss
        reason = link.failure or f"no AMQP attach within {timeout:.0f} s (option connectTimeout)"
        failures.append(amqp_failure(member, reason, timeout))
    kinds = {kind for kind, _ in failures}
    raise NodeUnavailable(sub.node, "AMQP: " + "; ".join(reason for _, reason in failures),
                          kinds.pop() if len(kinds) == 1 else None)
