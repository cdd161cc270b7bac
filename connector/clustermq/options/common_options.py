"""The options every connection needs, for reading and writing alike -> ``ConnectionOptions``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from clustermq.broker.connection_options import ConnectionOptions, ReconnectPolicy, Secret, TopicSubscription
from clustermq.broker.queue_names import queue_name
from clustermq.errors import OptionError
from clustermq.options.table import (
    ALLOW_NON_DURABLE,
    BACK_OFF_MULTIPLIER,
    BROKERS,
    CONNECT_TIMEOUT,
    FLAVOR,
    GROUP_ID_HEADER,
    HEARTBEAT,
    INITIAL_RECONNECT_DELAY,
    MAX_RECONNECT_DELAY,
    PASSWORD,
    QUEUE,
    SUBSCRIPTION_NAME,
    TOPIC,
    USE_EXPONENTIAL_BACK_OFF,
    USERNAME,
)
from clustermq.options.tls_options import parse_tls


def parse_connection_options(raw: Mapping[str, str], *, writing: bool = False) -> ConnectionOptions:
    """``raw`` holds lower-cased option names (as Spark passes them); ``writing``: a writer's,
    which publishes to a ``topic`` and so needs no subscription."""
    nodes = BROKERS.read(raw)
    tls = parse_tls(raw, nodes)
    if tls is not None:
        nodes = tuple(dataclasses.replace(n, tls=tls) if n.ssl else n for n in nodes)
    initial = INITIAL_RECONNECT_DELAY.read(raw)
    maximum = MAX_RECONNECT_DELAY.read(raw)
    if initial > maximum:
        raise OptionError(
            f"option '{INITIAL_RECONNECT_DELAY.name}' ({initial}) must not exceed "
            f"'{MAX_RECONNECT_DELAY.name}' ({maximum})"
        )
    password = PASSWORD.read(raw)
    username = USERNAME.read(raw)
    if password is not None and not username:
        raise OptionError(f"option '{PASSWORD.name}' is set but '{USERNAME.name}' is not")
    group_id_header = GROUP_ID_HEADER.read(raw)
    connect_timeout_s = CONNECT_TIMEOUT.seconds(raw)
    heartbeat_ms = HEARTBEAT.read(raw)
    topic = _topic(raw, writing)
    return ConnectionOptions(
        nodes=nodes,
        queues=(topic.topic,) if topic is not None else QUEUE.read(raw),
        flavor=FLAVOR.read(raw),
        username=username,
        password=Secret(password) if password is not None else None,
        group_id_header=group_id_header,
        reconnect=ReconnectPolicy(
            initial_delay_s=initial / 1000.0,
            max_delay_s=maximum / 1000.0,
            exponential=USE_EXPONENTIAL_BACK_OFF.read(raw),
            multiplier=BACK_OFF_MULTIPLIER.read(raw),
        ),
        connect_timeout_s=connect_timeout_s,
        heartbeat_ms=heartbeat_ms,
        tls=tls,
        topic=topic,
    )


def _topic(raw: Mapping[str, str], writing: bool) -> TopicSubscription | None:
    """The ``topic`` and, for a reader, its subscription; ``None`` for a queue. A topic read
    without a durable subscription loses what is published while it is not running, so it must
    be asked for by name (``allowNonDurable``); a writer only publishes, to whatever
    subscriptions the topic has."""
    name, subscription = TOPIC.text(raw), SUBSCRIPTION_NAME.text(raw)
    if name is None:
        if subscription is not None or ALLOW_NON_DURABLE.given(raw):
            given = SUBSCRIPTION_NAME if subscription is not None else ALLOW_NON_DURABLE
            raise given.error(f"applies to a topic; set '{TOPIC.name}' (or leave it unset to read '{QUEUE.name}')")
        return None
    if QUEUE.given(raw):
        raise TOPIC.error(f"and '{QUEUE.name}' are both set; allowed: one of them (queues or a topic)")
    topic = queue_name(name, TOPIC.name)
    if writing:
        return TopicSubscription(topic)
    if subscription is None:
        if not ALLOW_NON_DURABLE.read(raw):
            raise SUBSCRIPTION_NAME.error(
                f"is required with '{TOPIC.name}': a durable subscription keeps what is published while "
                f"the query is stopped; allowed: a name (e.g. 'orders-to-delta'), or "
                f"'{ALLOW_NON_DURABLE.name}=true' to accept losing those messages")
        return TopicSubscription(topic)
    if not subscription or any(c.isspace() or c in ",:*>#?/" or ord(c) < 32 for c in subscription):
        raise SUBSCRIPTION_NAME.error(
            f"'{subscription}' is not a subscription name; allowed: letters, digits, '.', '-', '_' "
            "(no spaces, no ',' ':' '*' '>' '#' '?' '/')")
    return TopicSubscription(topic, subscription)
