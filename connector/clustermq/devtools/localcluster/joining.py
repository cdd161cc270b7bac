"""A node that joins a running cluster (``cluster add``), and how any node's process starts."""

from __future__ import annotations

import logging
import time

from clustermq.broker.nodes import Node
from clustermq.devtools.localcluster import process
from clustermq.devtools.localcluster.flavor import BrokerFlavor, Progress
from clustermq.devtools.localcluster.flavors import get_flavor
from clustermq.devtools.localcluster.ports import HOST, amqp_ports, node_ports
from clustermq.devtools.localcluster.readiness import READY_TIMEOUT, ReadinessWaits
from clustermq.devtools.localcluster.state import ClusterState, NodeState

log = logging.getLogger(__name__)


class Joining(ReadinessWaits):
    """Launching a node's broker process, and adding a node to a running cluster."""

    def nodes(self) -> tuple[Node, ...]:
        """The cluster's nodes as clients address them (``LocalCluster`` says how)."""
        raise NotImplementedError

    def add_node(self, timeout: float = READY_TIMEOUT, progress: Progress | None = None) -> Node:
        """Start one more node that joins the running cluster; return its STOMP endpoint.

        Its config points at every existing node (Classic: duplex network connectors, so the
        old nodes forward to it without a new config; Artemis: static connectors, after which
        the cluster topology tells the others). Waits until it accepts logins and its bridges
        are up.
        """
        say = progress or log.info
        self.state()
        with self._lock():
            state = self.state()
            impl = get_flavor(state.flavor)
            if len(state.nodes) < 2:
                raise ValueError("a node joins a cluster of at least 2 nodes: a 1-node cluster is "
                                 "started without its cluster configuration")
            if any(n.backup_of is not None for n in state.nodes):
                raise ValueError("a node joins a cluster of single nodes: adding a failover pair "
                                 "to a cluster of pairs is not supported")
            index = max(n.index for n in state.nodes) + 1
            ((stomp, peer),) = node_ports(1, None)
            (amqp,) = amqp_ports(1, None, [(stomp, peer)])
            node = NodeState(index=index, name=f"node{index}", host=HOST, stomp_port=stomp,
                             peer_port=peer, joined=True, amqp_port=amqp)
            state.nodes.append(node)
            impl.render_config(state, node, self.node_dir(index))
            started = time.monotonic()
            say(f"adding {impl.name} node {index} ({node.name}): stomp {node.host}:{stomp}, peer port {peer}")
            self._launch(impl, state, node)
            state.save(self.dir)
            try:
                self._wait_ready(impl, state, [index], started + timeout, say, started)
                self._wait_mesh(impl, state, started + timeout, say, started, involving=index)
            except BaseException:
                process.stop(node.pid, self._marker(index), grace=5.0)
                state.nodes.remove(node)  # not a member: the cluster is as before
                state.save(self.dir)
                raise
        return self.nodes()[-1]

    def _launch(self, impl: BrokerFlavor, state: ClusterState, node: NodeState) -> None:
        node_dir = self.node_dir(node.index)
        log_path = self.log_path(node.index)
        node.log_offset = log_path.stat().st_size if log_path.exists() else 0
        node.started_at = time.time()
        node.pid = process.launch(impl.command(state, node, node_dir), cwd=node_dir, log_path=log_path)
