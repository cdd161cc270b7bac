"""Waiting for a local cluster's nodes: STOMP logins accepted, and the network mesh complete.

A node that accepts logins may not yet forward to its peers; a test that sends to one node and
consumes on another needs both. Waits poll the flavor's probes and give up with the end of the
node's log (:class:`~clustermq.devtools.localcluster.clusterdir.ClusterStartError`), and fail
at once when the node's process has exited.
"""

from __future__ import annotations

import logging
import time

from clustermq.devtools.localcluster import process
from clustermq.devtools.localcluster.clusterdir import ClusterDir
from clustermq.devtools.localcluster.flavor import BrokerFlavor, Progress
from clustermq.devtools.localcluster.flavors import get_flavor
from clustermq.devtools.localcluster.state import ClusterState

READY_TIMEOUT = 90.0

log = logging.getLogger(__name__)


class ReadinessWaits(ClusterDir):
    """The waits a cluster's start and a node's restart go through, also callable on their own."""

    def wait_ready(self, i: int, timeout: float = READY_TIMEOUT) -> float:
        """Block until node ``i`` accepts a STOMP login; return the seconds waited."""
        state = self.state()
        started = time.monotonic()
        self._wait_ready(get_flavor(state.flavor), state, [i], started + timeout, log.debug, started)
        return time.monotonic() - started

    def wait_mesh(self, timeout: float = READY_TIMEOUT) -> float:
        """Block until every node forwards to every other (no-op if the flavor cannot tell)."""
        state = self.state()
        started = time.monotonic()
        self._wait_mesh(get_flavor(state.flavor), state, started + timeout, log.debug, started)
        return time.monotonic() - started

    def _wait_ready(
        self,
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
                node = self._node(state, i)
                if not process.is_running(node.pid, self._marker(i)):
                    raise self._failure(state, i, f"node {i} ({node.name}) exited during start-up")
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
                raise self._failure(
                    state, first, f"timed out waiting for STOMP logins to succeed ({waiting})"
                )
            time.sleep(0.25)

    def _wait_mesh(
        self, impl: BrokerFlavor, state: ClusterState, deadline: float, say: Progress, started: float,
        involving: int | None = None,
    ) -> None:
        """Wait for the bridges of the mesh; with ``involving``, only those to and from that node.

        A restarted node needs its own bridges back; a bridge between two other nodes that
        flaps meanwhile (measured in CI: Classic refused node0's reconnect to node2 with
        InvalidClientIDException while node2 still held the old connection) is not its concern.
        """
        # A pair's standby members are not in the mesh until they take over.
        network = [n for n in state.nodes if n.backup_of is None]
        if involving is not None:  # a node restarted while others are down joins those that run
            network = [n for n in network
                       if n.index == involving or process.is_running(n.pid, self._marker(n.index))]
        if len(network) < 2:
            return
        names = {n.name for n in network}
        while True:
            missing: dict[int, set[str]] = {}
            for node in network:
                peers = impl.connected_peers(state, node, self._log_since(node.index, node.log_offset))
                if peers is None:
                    return
                lacking = names - {node.name} - peers
                if involving is not None and node.index != involving:
                    lacking &= {self._node(state, involving).name}
                if lacking:
                    missing[node.index] = lacking
            if not missing:
                say(f"network mesh complete in {time.monotonic() - started:.1f} s")
                return
            for i in missing:
                node = self._node(state, i)
                if not process.is_running(node.pid, self._marker(i)):
                    raise self._failure(state, i, f"node {i} ({node.name}) exited while joining the mesh")
            if time.monotonic() >= deadline:
                first = min(missing)
                detail = "; ".join(
                    f"{self._node(state, i).name} not yet bridged to {', '.join(sorted(lack))}"
                    for i, lack in sorted(missing.items())
                )
                raise self._failure(state, first, f"timed out waiting for the network mesh ({detail})")
            time.sleep(0.25)
