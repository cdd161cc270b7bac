"""The options every connection needs, for reading and writing alike -> ``ConnectionOptions``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from clustermq.broker.connection_options import ConnectionOptions, ReconnectPolicy, Secret
from clustermq.errors import OptionError
from clustermq.options.table import (
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
    USE_EXPONENTIAL_BACK_OFF,
    USERNAME,
)
from clustermq.options.tls_options import parse_tls


def parse_connection_options(raw: Mapping[str, str]) -> ConnectionOptions:
    """``raw`` holds lower-cased option names (as Spark passes them)."""
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
    return ConnectionOptions(
        nodes=nodes,
        queues=QUEUE.read(raw),
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
    )
