"""The reader's and the writer's options, validated before anything is consumed or sent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from clustermq.broker.connection_options import ConnectionOptions
from clustermq.broker.dialect import configured_dialect
from clustermq.broker.nodes import Node, parse_nodes
from clustermq.broker.queue_names import queue_patterns
from clustermq.errors import OptionError
from clustermq.options.amqp_options import parse_amqp_nodes
from clustermq.options.common_options import parse_connection_options
from clustermq.options.table import (
    ACK_MODE,
    AVAILABLE_NOW_IDLE_TIMEOUT,
    BROWSE_IDLE_TIMEOUT,
    DISCOVERY,
    HEADERS_FROM_COLUMNS,
    INCLUDE_DELIVERY_COUNT,
    LOAD_BALANCING_POLICY,
    MAX_BYTES_PER_TRIGGER,
    MAX_MESSAGES_PER_TRIGGER,
    MODE,
    NO_NODE_TIMEOUT,
    NUM_PARTITIONS,
    PERSISTENT,
    PREFETCH_PER_NODE,
    PRIORITY_NODES,
    RECEIPT_TIMEOUT,
    REPLAY_TIMEOUT,
    SELECTOR,
    TOPIC,
    TRANSPORT,
    WRITE_MODE,
    check_known,
    default_prefetch,
)


@dataclass(frozen=True)
class ReadOptions:
    """Validated options of the streaming and the batch reader."""

    connection: ConnectionOptions
    num_partitions: int
    max_messages_per_trigger: int | None
    max_bytes_per_trigger: int | None
    prefetch_per_node: int
    ack_mode: str
    no_node_timeout_s: float
    available_now_idle_timeout_s: float
    replay_timeout_s: float
    mode: str
    browse_idle_timeout_s: float
    discovery: str = "none"
    #: numPartitions not set with discovery=cluster: the number of nodes discovered at start
    partitions_per_node: bool = False
    #: names of the preferred nodes (``priorityNodes``); () for none
    priority_nodes: tuple[str, ...] = ()
    #: ``stomp`` or ``amqp`` (read/links.py); with ``amqp`` each node's AMQP endpoint by node name
    transport: str = "stomp"
    amqp_nodes: tuple[tuple[str, Node], ...] = ()
    #: the JMS selector every subscription and browse carries (``selector``); None: every message
    selector: str | None = None
    #: rows carry ``delivery_count`` (``includeDeliveryCount``; AMQP only)
    include_delivery_count: bool = False

    def amqp_node(self, name: str) -> Node:
        """The AMQP endpoint (``amqpBrokers``) of the node ``name`` of ``brokers``."""
        return dict(self.amqp_nodes)[name]

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        raw = check_known(options, "read")
        conn = parse_connection_options(raw)
        max_messages = MAX_MESSAGES_PER_TRIGGER.read(raw)
        max_bytes = MAX_BYTES_PER_TRIGGER.read(raw)
        prefetch = PREFETCH_PER_NODE.read_or(raw, default_prefetch(max_messages))
        transport = TRANSPORT.read(raw)
        delivery_count = INCLUDE_DELIVERY_COUNT.read(raw)
        patterns = queue_patterns(conn.queues)
        if patterns and transport == "amqp":
            raise TRANSPORT.error(
                f"'amqp' reads named queues; the queue pattern '{patterns[0]}' is read over STOMP "
                f"({TRANSPORT.name}=stomp, the default)")
        flavor = configured_dialect(conn.flavor)
        if flavor is not None:
            flavor.check_queue_patterns(conn.queues)
        if conn.topic is not None:
            _check_topic_read(raw)
        if delivery_count and transport != "amqp":
            raise INCLUDE_DELIVERY_COUNT.error(
                f"needs {TRANSPORT.name}=amqp (it is '{transport}'): the brokers' STOMP frames carry "
                "no delivery count, only 'redelivered'")
        return cls(
            connection=conn,
            num_partitions=NUM_PARTITIONS.read_or(raw, len(conn.nodes)),
            max_messages_per_trigger=max_messages,
            max_bytes_per_trigger=max_bytes,
            prefetch_per_node=prefetch,
            ack_mode=ACK_MODE.read(raw),
            no_node_timeout_s=NO_NODE_TIMEOUT.seconds(raw),
            available_now_idle_timeout_s=AVAILABLE_NOW_IDLE_TIMEOUT.seconds(raw),
            replay_timeout_s=REPLAY_TIMEOUT.seconds(raw),
            mode=MODE.read(raw),
            browse_idle_timeout_s=BROWSE_IDLE_TIMEOUT.seconds(raw),
            discovery=DISCOVERY.read(raw),
            partitions_per_node=NUM_PARTITIONS.key not in raw,
            priority_nodes=tuple(conn.nodes[i].name for i in _priority(raw, conn.nodes)),
            transport=transport,
            amqp_nodes=parse_amqp_nodes(raw, conn.nodes, transport, DISCOVERY.read(raw)),
            selector=SELECTOR.read(raw),
            include_delivery_count=delivery_count,
        )


@dataclass(frozen=True)
class WriteOptions:
    """Validated options of the batch and streaming writer."""

    connection: ConnectionOptions
    load_balancing_policy: str
    persistent: bool
    headers_from_columns: bool
    receipt_timeout_s: float
    discovery: str = "none"
    #: indices into ``connection.nodes`` of the preferred nodes (``priorityNodes``); () for none
    priority: tuple[int, ...] = ()
    #: ``atomic`` (through staging) or ``direct`` (each task straight into the queue)
    write_mode: str = "atomic"

    @property
    def direct(self) -> bool:
        return self.write_mode == "direct"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        # writeStream passes its checkpointLocation to the sink like any other option.
        given = {k: v for k, v in options.items() if k.lower() != "checkpointlocation"}
        raw = check_known(given, "write")
        conn = parse_connection_options(raw, writing=True)
        patterns = queue_patterns(conn.queues)
        if patterns:
            raise OptionError(
                f"option 'queue': the writer publishes to one queue, not to a pattern "
                f"('{patterns[0]}'); allowed: one queue name")
        if len(conn.queues) > 1:
            raise OptionError(
                f"option 'queue': the writer publishes to one queue, got {len(conn.queues)} "
                f"({conn.queue_names}); allowed: one queue name (route rows to other queues with "
                "the 'destination' column)")
        receipt_timeout_s = RECEIPT_TIMEOUT.seconds(raw)
        return cls(
            connection=conn,
            load_balancing_policy=LOAD_BALANCING_POLICY.read(raw),
            persistent=PERSISTENT.read(raw),
            headers_from_columns=HEADERS_FROM_COLUMNS.read(raw),
            receipt_timeout_s=receipt_timeout_s,
            discovery=DISCOVERY.read(raw),
            priority=_priority(raw, conn.nodes),
            write_mode=WRITE_MODE.read(raw),
        )


def _check_topic_read(raw: Mapping[str, str]) -> None:
    """Refuse what a topic read does not do yet, each with the reason, before it connects."""
    refused = (
        (TRANSPORT, TRANSPORT.read(raw) == "amqp", "a topic is read over STOMP"),
        (DISCOVERY, DISCOVERY.read(raw) == "cluster",
         "a topic's subscriptions live on the nodes listed in 'brokers'; list them all"),
        (PRIORITY_NODES, PRIORITY_NODES.given(raw), "a topic's subscriptions do not fail over between nodes"),
        (SELECTOR, SELECTOR.given(raw), "a topic subscription reads every message published to it"),
    )
    for option, given, reason in refused:
        if given:
            raise option.error(f"is not supported with '{TOPIC.name}': {reason}")


def _priority(raw: Mapping[str, str], nodes: tuple[Node, ...]) -> tuple[int, ...]:
    """``priorityNodes`` as indices of ``brokers``: each must be one of its nodes, none twice."""
    text = PRIORITY_NODES.read(raw)
    if text is None:
        return ()
    try:
        wanted = parse_nodes(text, PRIORITY_NODES.name) if text.strip() else ()
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    if not wanted:
        raise PRIORITY_NODES.error("is empty; name one or more nodes of 'brokers'")
    names = [n.name for n in nodes]
    unknown = [n.name for n in wanted if n.name not in names]
    if unknown:
        raise PRIORITY_NODES.error(
            f"{', '.join(unknown)} not in 'brokers'; allowed: a subset of {', '.join(names)}")
    return tuple(sorted(names.index(n.name) for n in wanted))
