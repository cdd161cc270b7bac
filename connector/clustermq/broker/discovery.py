"""Cluster discovery (option ``discovery=cluster``): the node list from what a seed publishes.

A node publishes its peers' *cluster* addresses (Classic: OpenWire, Artemis: the core cluster
connector; see the dialects' ``cluster_members``), never their STOMP ports. The convention
filling the gap: every node's STOMP port is its cluster port plus the same offset, which the
seed shows (its STOMP port in ``brokers`` minus its own cluster port). The products' defaults
follow it (STOMP 61613, cluster 61616), and so does the local cluster (STOMP ``p``, cluster
``p + 1``). A discovered node's name (its offset key) is ``host:port`` from these addresses,
so it is the same in every run while the cluster keeps its addresses.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from clustermq.broker.connection_options import ConnectionOptions
from clustermq.broker.listener import Inbox
from clustermq.broker.nodes import Node
from clustermq.broker.request import Requester
from clustermq.broker.session import open_node
from clustermq.errors import DepthError, NodeUnavailable

log = logging.getLogger("clustermq.discovery")

#: how often a running query asks the cluster for its members
REFRESH_INTERVAL_S = 5.0


def members_of(seed: Node, conn: ConnectionOptions) -> list[Node]:
    """The cluster's nodes as ``seed`` knows them, itself first; ``DepthError`` if it cannot tell."""
    inbox = Inbox()
    deadline = time.monotonic() + conn.connect_timeout_s
    probe = dataclasses.replace(conn, nodes=(seed,), heartbeat_ms=0)
    try:
        session = open_node(seed, probe, inbox, "clustermq-discovery",
                            socket_timeout_s=max(0.5, min(conn.connect_timeout_s, 5.0)))
    except NodeUnavailable as exc:
        raise DepthError(str(exc)) from None
    try:
        own_port, peers = session.dialect.cluster_members(Requester(session.conn, inbox, deadline))
    finally:
        session.close()
    offset = seed.port - own_port
    nodes = [seed]
    for host, port in peers:
        if 0 < port + offset < 65536:
            nodes.append(dataclasses.replace(seed, host=host, port=port + offset))
    return nodes


def published(conn: ConnectionOptions) -> tuple[Node, ...] | None:
    """The cluster's nodes as the first seed that answers publishes them, itself first;
    ``None`` when no seed answered."""
    errors = []
    for seed in conn.nodes:
        try:
            return tuple(members_of(seed, conn))
        except (DepthError, NotImplementedError, ValueError, OSError) as exc:
            errors.append(f"{seed.name}: {exc}")
    log.warning("clustermq: cluster discovery got no answer: %s", "; ".join(errors))
    return None


def merged(seeds: tuple[Node, ...], found: tuple[Node, ...]) -> tuple[Node, ...]:
    """The seeds, then the other nodes ``found`` (sorted by name)."""
    known = {n.name for n in seeds}
    return tuple(seeds) + tuple(sorted({n.name: n for n in found if n.name not in known}.values()))


def discover(conn: ConnectionOptions) -> tuple[Node, ...] | None:
    """Every node of the cluster: the ``brokers`` seeds, then what the first seed that answers
    publishes (sorted by name); ``None`` when no seed answered."""
    found = published(conn)
    return None if found is None else merged(tuple(conn.nodes), found)


def with_discovered(conn: ConnectionOptions) -> ConnectionOptions:
    """``conn`` with the discovered node list (the seeds alone when no seed answered)."""
    nodes = discover(conn)
    return conn if nodes is None else dataclasses.replace(conn, nodes=nodes)
