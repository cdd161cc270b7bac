"""Failover pairs in a local cluster: members that share one store and form one node.

``cluster up --backups 1`` gives every node of the network a standby member: a Classic slave on
the master's KahaDB directory (it waits for the store's file lock) or an Artemis backup with the
shared-store HA policy (it waits for the journal's lock). A standby opens no transport until it
holds the lock, so it refuses STOMP logins: the member that accepts one is the live member.
Members are ordinary entries of ``ClusterState.nodes``; a standby's ``backup_of`` names the index
of the node it backs up, and it has the same broker name (the pair is one broker of the network).
"""

from __future__ import annotations

import re
from pathlib import Path

from clustermq.broker.nodes import Node, TlsSettings
from clustermq.devtools.localcluster.state import ClusterState, NodeState

# What a member logs while it waits for the store's lock (Classic SharedFileLocker; Artemis
# shared-store backup, and a restarted Artemis primary waiting for the live lock).
STANDBY_LINE = re.compile(
    r"is locked by another server|waiting a lock to be acquired|AMQ221032|AMQ221109|AMQ221033|"
    r"AMQ221034|Waiting to become backup|Waiting to obtain (?:live|primary) lock|Waiting indefinitely"
)
# How often a Classic slave tries the KahaDB lock (the broker's default is 10 s).
LOCK_ACQUIRE_SLEEP_MS = 1000


def logical_index(node: NodeState) -> int:
    """The index of the network node ``node`` is a member of."""
    return node.index if node.backup_of is None else node.backup_of


def is_paired(state: ClusterState) -> bool:
    return any(n.backup_of is not None for n in state.nodes)


def members(state: ClusterState, logical: int) -> list[NodeState]:
    """The members of node ``logical`` in failover order: the first master, then its standbys."""
    return sorted((n for n in state.nodes if logical_index(n) == logical), key=lambda n: n.index)


def logical_indices(state: ClusterState) -> list[int]:
    return sorted({logical_index(n) for n in state.nodes})


def store_dir(node: NodeState, node_dir: Path) -> Path:
    """The node directory whose ``data`` holds the pair's shared store (the first master's)."""
    return node_dir if node.backup_of is None else node_dir.parent / f"node{node.backup_of}"


def member_label(node: NodeState) -> str:
    """A name unique among all members (broker names are shared within a pair)."""
    return node.name if node.backup_of is None else f"{node.name}-backup{node.index}"


def client_nodes(state: ClusterState, amqp: bool = False) -> tuple[Node, ...]:
    """The connector's nodes: a plain node per unpaired broker, a failover group per pair;
    with ``amqp`` their AMQP ports (option ``amqpBrokers``, plain TCP) instead of STOMP's."""
    tls = TlsSettings(ca_file=state.ca_file) if state.tls and not amqp else None

    def one(n: NodeState) -> Node:
        if amqp:
            return Node(host=n.host, port=n.amqp_port)
        return Node(host=n.host, port=n.stomp_port, ssl=state.tls, tls=tls)

    nodes = []
    for logical in logical_indices(state):
        group = [one(m) for m in members(state, logical)]
        if len(group) == 1:
            nodes.append(group[0])
        else:
            nodes.append(Node(host=group[0].host, port=group[0].port, ssl=group[0].ssl, tls=tls,
                              members=tuple(group)))
    return tuple(nodes)
