"""Waiting for a local cluster's nodes: STOMP logins accepted, the network mesh complete, and a
failover pair's standby in place.

A node that accepts logins may not yet forward to its peers; a test that sends to one node and
consumes on another needs both. Waits poll the flavor's probes and give up with the end of the
node's log (:class:`~clustermq.devtools.localcluster.clusterdir.ClusterStartError`), and fail
at once when the node's process has exited.
"""

from __future__ import annotations

import time

from clustermq.devtools.localcluster.broker_flavor import BrokerFlavor, Progress
from clustermq.devtools.localcluster.clusterdir import ClusterDir, node_at
from clustermq.devtools.localcluster.failover_pairs import STANDBY_LINE
from clustermq.devtools.localcluster.state import ClusterState

READY_TIMEOUT = 90.0


def wait_ready(
    directory: ClusterDir,
    impl: BrokerFlavor,
    state: ClusterState,
    indices: list[int],
    deadline: float,
    say: Progress,
    started: float,
) -> None:
    """Poll the nodes ``indices`` until each accepts a STOMP login (``say`` reports each)."""
    pending = {i: "not probed yet" for i in indices}
    while pending:
        for i in list(pending):
            node = node_at(state, i)
            if not directory.is_running(node):
                raise directory.failure(state, i, f"node {i} ({node.name}) exited during start-up")
            probe = impl.probe_ready(state, node, timeout=2.0)
            if probe.ok:
                del pending[i]
                say(f"node {i} ready in {time.monotonic() - started:.1f} s")
            else:
                pending[i] = probe.reason
        if not pending:
            return
        if time.monotonic() >= deadline:
            first = min(pending)
            waiting = "; ".join(f"node {i}: {reason}" for i, reason in sorted(pending.items()))
            raise directory.failure(
                state, first, f"timed out waiting for STOMP logins to succeed ({waiting})"
            )
        time.sleep(0.25)


def wait_mesh(
    directory: ClusterDir, impl: BrokerFlavor, state: ClusterState, deadline: float, say: Progress,
    started: float, involving: int | None = None,
) -> None:
    """Wait for the bridges of the mesh; with ``involving``, only those to and from that node.

    A restarted node needs its own bridges back; a bridge between two other nodes that flaps
    meanwhile is not its concern (docs/decisions.md, "The local cluster's waits").
    """
    # A pair's standby members are not in the mesh until they take over.
    network = [n for n in state.nodes if n.backup_of is None]
    if involving is not None:  # a node restarted while others are down joins those that run
        network = [n for n in network if n.index == involving or directory.is_running(n)]
    if len(network) < 2:
        return
    names = {n.name for n in network}
    while True:
        missing: dict[int, set[str]] = {}
        for node in network:
            peers = impl.connected_peers(state, node, directory.log_since(node.index, node.log_offset))
            if peers is None:
                return
            lacking = names - {node.name} - peers
            if involving is not None and node.index != involving:
                lacking &= {node_at(state, involving).name}
            if lacking:
                missing[node.index] = lacking
        if not missing:
            say(f"network mesh complete in {time.monotonic() - started:.1f} s")
            return
        for i in missing:
            node = node_at(state, i)
            if not directory.is_running(node):
                raise directory.failure(state, i, f"node {i} ({node.name}) exited while joining the mesh")
        if time.monotonic() >= deadline:
            first = min(missing)
            detail = "; ".join(
                f"{node_at(state, i).name} not yet bridged to {', '.join(sorted(lack))}"
                for i, lack in sorted(missing.items())
            )
            raise directory.failure(state, first, f"timed out waiting for the network mesh ({detail})")
        time.sleep(0.25)


def wait_standby(
    directory: ClusterDir, impl: BrokerFlavor, state: ClusterState, index: int, deadline: float,
    say: Progress,
) -> None:
    """Wait until member ``index`` logs that it waits for the store's lock (or went live)."""
    node = node_at(state, index)
    while True:
        if not directory.is_running(node):
            raise directory.failure(state, index, f"member {index} ({node.name}) exited during start-up")
        if STANDBY_LINE.search(directory.log_since(index, node.log_offset)):
            say(f"member {index} of {node.name} waits as standby")
            return
        if impl.probe_ready(state, node, timeout=1.0).ok:
            say(f"member {index} of {node.name} is live")
            return
        if time.monotonic() >= deadline:
            raise directory.failure(state, index, f"member {index} ({node.name}) neither standby nor live")
        time.sleep(0.25)
