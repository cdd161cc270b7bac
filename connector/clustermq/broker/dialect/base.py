"""What the connector needs to know about one kind of broker, and what is the same for all.

The rest of the connector asks its dialect object and never tests the flavour itself; the
flavours themselves are in :mod:`clustermq.broker.dialect.classic_dialect` and
:mod:`clustermq.broker.dialect.artemis_dialect`.
"""

from __future__ import annotations

from collections.abc import Mapping

from clustermq.broker.connection_options import TopicSubscription
from clustermq.broker.queue_names import queue_patterns
from clustermq.broker.request import Requester
from clustermq.errors import BrowseNotSupported, DepthError, OptionError

#: what to do instead of a browse, where a broker cannot browse
READ_BY_DRAINING = (
    "read it with a draining query instead (readStream, Trigger.AvailableNow), which consumes "
    "and acknowledges on commit"
)


class BrokerDialect:
    """What the connector needs to know about one kind of broker."""

    name: str = "abstract"
    #: the product, as error messages name it
    product: str = "this broker"
    #: header in which the broker itself returns a message's group to STOMP consumers
    group_header: str | None = None
    #: whether STOMP can browse a queue without consuming it
    can_browse: bool = False
    #: whether an ACK inside a STOMP transaction is undone by ABORT (else it takes effect at once)
    transactional_ack: bool = True
    #: whether the broker drops a SEND whose :meth:`duplicate_id_headers` it has seen before
    drops_duplicates: bool = False
    #: whether STOMP consumers may not see the group of a message a JMS (OpenWire, AMQP) producer
    #: grouped, while the broker still pins each group to one consumer: the reader then keeps a
    #: group together by the subscription ("group slot") it arrived on (read/slots.py)
    hides_jms_group: bool = False
    #: why a source cannot read a queue pattern (``orders.>``) on this broker; ``None`` where
    #: it can (broker/queue_names.py)
    queue_patterns_refused: str | None = "it has no queue patterns"
    #: whether :meth:`move_messages` keeps a message's expiration (JMSExpiration)
    move_keeps_expiration: bool = True
    #: whether a topic is read through a subscription on every node, because the cluster gives
    #: each message to one of them; else on the first node of ``brokers`` only, because every
    #: node's subscription would get its own copy of each message (docs/design.md, Topics)
    topic_on_every_node: bool = True
    #: how long a fresh subscription may take to deliver a first message the node holds: a
    #: query's first ``latestOffset`` waits that long for one before it answers "nothing yet"
    first_delivery_wait_s: float = 0.2

    def destination(self, queue: str) -> str:
        return f"/queue/{queue}"

    def topic_destination(self, topic: str) -> tuple[str, dict[str, str]]:
        """The destination of ``topic`` and the routing headers a SEND or SUBSCRIBE there needs
        (in place of :meth:`routing_headers`)."""
        return f"/topic/{topic}", {}

    def target(self, name: str, topic: bool) -> tuple[str, dict[str, str]]:
        """Where a SEND to the queue or (``topic``) the topic ``name`` goes, and its routing
        headers: one place for the writer's direct SENDs and its moves out of staging."""
        return self.topic_destination(name) if topic else (self.destination(name), self.routing_headers())

    def amqp_source(self, queue: str) -> tuple[str, tuple[str, ...]]:
        """The AMQP 1.0 source address of ``queue`` and its capabilities (transport=amqp)."""
        return queue, ("queue",)

    def topic_subscription(self, topic: TopicSubscription) -> tuple[str, dict[str, str]]:
        """The SUBSCRIBE destination of ``topic`` and the headers that make the subscription
        durable under its name (the CONNECT carries ``topic.client_id``)."""
        raise NotImplementedError(f"{self.product}: no topic subscription over STOMP")

    def tells_subscription_depth(self, topic: TopicSubscription) -> bool:
        """Whether :meth:`subscription_depth` can answer for ``topic``: where it cannot, asking
        costs a login per node for nothing, so the lag probe does not ask."""
        return False

    def subscription_depth(self, requests: Requester, topic: TopicSubscription) -> int:
        """Messages ``topic``'s durable subscription holds on the node ``requests`` is connected
        to; :class:`~clustermq.errors.DepthError` where the node cannot tell."""
        raise DepthError(f"{self.product} tells no depth of a topic subscription over STOMP")

    def routing_headers(self) -> dict[str, str]:
        """Headers every SEND and SUBSCRIBE to a queue needs."""
        return {}

    def subscribe_headers(
        self, prefetch: int, window_bytes: int | None = None, *, body_bytes: int = 1024, batch_bytes: int = 0
    ) -> dict[str, str]:
        """Flow control: how much a node may deliver ahead of acknowledgements.

        ``prefetch`` messages. Where the broker counts bytes instead: ``window_bytes`` when
        given, else room for ``prefetch`` messages of about ``body_bytes`` each and for two
        batches of ``batch_bytes`` (one being processed, the next buffered).
        """
        return dict(self.routing_headers())

    def selector_probe(self, token: str) -> tuple[str, dict[str, str]]:
        """A destination that holds no message, exists for one subscriber and goes with it, and
        its SUBSCRIBE headers: subscribing there with a selector makes the node parse it
        without consuming anything (broker/selector_check.py)."""
        raise NotImplementedError(f"{self.product}: no destination to check a selector on")

    def browse_headers(self) -> dict[str, str]:
        """SUBSCRIBE headers of a browse (see :meth:`check_browse` first)."""
        return dict(self.routing_headers())

    def browse_ended(self, headers: Mapping[str, str]) -> bool:
        """Whether a browse delivery is the broker's end-of-listing marker, not a message."""
        return False

    def check_browse(self, hint: str = READ_BY_DRAINING, where: str = "") -> None:
        """Raise :class:`BrowseNotSupported` where STOMP cannot browse (read without consuming).

        ``where`` starts the message (e.g. the node), ``hint`` ends it with what to do instead.
        """
        if not self.can_browse:
            raise BrowseNotSupported(
                f"{where}{self.product} cannot browse a queue over STOMP (read without "
                f"consuming); {hint}"
            )

    def check_queue_patterns(self, queues: tuple[str, ...], where: str = "") -> None:
        """Raise :class:`OptionError` naming the first pattern among ``queues`` where this broker
        cannot read patterns, before anything subscribes with it."""
        patterns = queue_patterns(queues)
        if patterns and self.queue_patterns_refused is not None:
            raise OptionError(
                f"{where}option 'queue': {self.product} cannot read the queue pattern "
                f"'{patterns[0]}': {self.queue_patterns_refused}; allowed: queue names, listed "
                "with ',' (e.g. 'orders.eu,orders.us')")

    def group_id(self, headers: Mapping[str, str], fallback_header: str) -> str | None:
        """The message's group id: the broker's own header first, then ``fallback_header``."""
        if self.group_header:
            value = headers.get(self.group_header)
            if value:
                return value
        value = headers.get("JMSXGroupID") or headers.get(fallback_header)
        return value or None

    def send_headers(self, group_id: str | None, fallback_header: str) -> dict[str, str]:
        """Group headers for a SEND: broker-side grouping plus the header the reader reads."""
        headers = dict(self.routing_headers())
        if group_id is not None:
            headers["JMSXGroupID"] = group_id
            headers[fallback_header] = group_id
        return headers

    def added_headers(self) -> frozenset[str]:
        """Headers the broker adds to a delivered message: a copy sent again must not carry them."""
        return frozenset({self.group_header}) if self.group_header else frozenset()

    def duplicate_id_headers(self, message_key: str) -> dict[str, str]:
        """Headers that let the broker itself drop a duplicate SEND (where it can)."""
        return {}

    def message_id(self, headers: Mapping[str, str], node: str) -> str | None:
        """The message's id: unique in the cluster, stable across redeliveries by ``node``."""
        return headers.get("message-id")

    def header_value_problem(self, headers: Mapping[str, str]) -> str | None:
        """Why the broker would not deliver one of these header values intact, or ``None``."""
        return None

    def queue_depth(self, requests: Requester, queue: str) -> int:
        """Messages of ``queue`` held by the node ``requests`` is connected to.

        Raises :class:`~clustermq.errors.DepthError` when the node cannot tell.
        """
        raise NotImplementedError(f"{self.product}: no queue depth over STOMP")

    def cluster_members(self, requests: Requester) -> tuple[int, list[tuple[str, int]]]:
        """What the node ``requests`` is connected to publishes about its cluster: its own
        cluster (inter-broker) port, and the cluster ``(host, port)`` of each peer it knows.

        Raises :class:`~clustermq.errors.DepthError` when the node cannot tell.
        """
        raise NotImplementedError(f"{self.product}: no cluster membership over STOMP")

    def can_manage(self, requests: Requester) -> bool:
        """Whether the login may manage queues over STOMP (list, move inside the broker,
        destroy); where it may, each writer task attempt stages into its own queues and the
        commit moves them with :meth:`move_messages`."""
        return False

    def queue_names(self, requests: Requester, prefix: str) -> list[str]:
        """The node's queues whose names start with ``prefix`` (see :meth:`can_manage`)."""
        raise NotImplementedError(f"{self.product}: no queue listing over STOMP")

    def move_messages(self, requests: Requester, source: str, target: str, selector: str,
                      limit: int) -> int:
        """Move up to ``limit`` messages of ``source`` that ``selector`` selects into queue
        ``target`` on the same node, inside the broker, in order, as one transaction; a message
        whose duplicate id ``target`` already has is dropped. Returns the count moved or
        dropped (see :meth:`can_manage`)."""
        raise NotImplementedError(f"{self.product}: no move inside the broker over STOMP")

    def destroy_queue(self, requests: Requester, name: str) -> None:
        """Delete queue ``name`` and its messages on the node (see :meth:`can_manage`)."""
        raise NotImplementedError(f"{self.product}: no queue deletion over STOMP")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
