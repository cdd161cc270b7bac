"""Starting and stopping the brokers of a local cluster, with what ``cluster.json`` records of
each process (pid, start time, where its log begins).

:mod:`.process` starts and signals one process; this module ties a process to its node, so a
later call (another test, another terminal) finds it by the recorded pid and marker.
"""

from __future__ import annotations

import signal
import time

from clustermq.devtools.localcluster import process
from clustermq.devtools.localcluster.broker_flavor import BrokerFlavor
from clustermq.devtools.localcluster.clusterdir import ClusterDir
from clustermq.devtools.localcluster.state import ClusterState, NodeState

STOP_GRACE = 30.0


def launch_node(directory: ClusterDir, impl: BrokerFlavor, state: ClusterState, node: NodeState) -> None:
    """Start ``node``'s broker and record its pid; the caller saves ``state``."""
    node_dir = directory.node_dir(node.index)
    log_path = directory.log_path(node.index)
    node.log_offset = directory.log_size(node.index)
    node.started_at = time.time()
    node.pid = process.launch(impl.command(state, node, node_dir), cwd=node_dir, log_path=log_path)


def stop_all(directory: ClusterDir, state: ClusterState, grace: float = STOP_GRACE) -> None:
    """SIGTERM every live node at once, then wait for each (SIGKILL on overrun)."""
    for node in state.nodes:
        process.send_signal(node.pid, directory.marker(node.index), signal.SIGTERM)
    deadline = time.monotonic() + grace
    errors = []
    for node in state.nodes:
        try:
            process.stop(node.pid, directory.marker(node.index), grace=max(0.0, deadline - time.monotonic()))
        except RuntimeError as exc:  # pragma: no cover - SIGKILL always works on Linux
            errors.append(str(exc))
            continue
        node.pid = None
    state.save(directory.dir)
    if errors:
        raise RuntimeError("; ".join(errors))
