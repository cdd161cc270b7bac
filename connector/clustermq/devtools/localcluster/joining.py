"""A node that joins a running cluster (``cluster add``)."""

from __future__ import annotations

import time

from clustermq.devtools.localcluster import process
from clustermq.devtools.localcluster.broker_flavor import Progress
from clustermq.devtools.localcluster.clusterdir import ClusterDir
from clustermq.devtools.localcluster.flavor_registry import get_flavor
from clustermq.devtools.localcluster.node_processes import launch_node
from clustermq.devtools.localcluster.ports import HOST, amqp_ports, node_ports
from clustermq.devtools.localcluster.readiness import wait_mesh, wait_ready
from clustermq.devtools.localcluster.state import NodeState


def join_node(directory: ClusterDir, timeout: float, say: Progress) -> None:
    """Start one more node that joins the running cluster; it is the last of ``state().nodes``.

    Its config points at every existing node (Classic: duplex network connectors, so the old
    nodes forward to it without a new config; Artemis: static connectors, after which the
    cluster topology tells the others). Waits until it accepts logins and its bridges are up; on
    failure the node is stopped and the cluster is recorded as before.
    """
    directory.state()
    with directory.lock():
        state = directory.state()
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
        impl.render_config(state, node, directory.node_dir(index))
        started = time.monotonic()
        say(f"adding {impl.name} node {index} ({node.name}): stomp {node.host}:{stomp}, peer port {peer}")
        launch_node(directory, impl, state, node)
        state.save(directory.dir)
        try:
            wait_ready(directory, impl, state, [index], started + timeout, say, started)
            wait_mesh(directory, impl, state, started + timeout, say, started, involving=index)
        except BaseException:
            process.stop(node.pid, directory.marker(index), grace=5.0)
            state.nodes.remove(node)  # not a member: the cluster is as before
            state.save(directory.dir)
            raise
