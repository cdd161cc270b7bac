"""Creating and starting a fresh local cluster (``cluster up``).

A fresh cluster has new ports, a new password and, with TLS, a new CA: whatever a previous
cluster left in the directory is replaced, and a start that fails stops every node it started,
so a failed ``up`` leaves no broker behind.
"""

from __future__ import annotations

import secrets
import shutil
import string
import time
from dataclasses import dataclass

from clustermq.devtools.localcluster.broker_flavor import BrokerFlavor, Progress
from clustermq.devtools.localcluster.certificates import TLS_DIR, generate_cluster_tls, keystore_password
from clustermq.devtools.localcluster.clusterdir import NODE_DIR_NAME, ClusterDir
from clustermq.devtools.localcluster.node_processes import launch_node, stop_all
from clustermq.devtools.localcluster.ports import HOST, amqp_ports, node_ports
from clustermq.devtools.localcluster.readiness import wait_mesh, wait_ready, wait_standby
from clustermq.devtools.localcluster.state import ClusterState, NodeState

#: letters and digits only: the brokers' own command-line clients (``bin/activemq producer``,
#: ``bin/artemis producer``) take a ``--password`` value that starts with ``-`` for the next
#: option ("Unrecognized option: --password", then a refused login); ``token_urlsafe`` starts
#: one password in 64 with it
PASSWORD_ALPHABET = string.ascii_letters + string.digits
PASSWORD_LENGTH = 24


def new_password() -> str:
    """A random password for a new local cluster (143 bits)."""
    return "".join(secrets.choice(PASSWORD_ALPHABET) for _ in range(PASSWORD_LENGTH))


@dataclass(frozen=True)
class ClusterShape:
    """What ``cluster up`` is asked for: checked before anything is created."""

    nodes: int
    base_port: int | None
    username: str
    password: str | None
    tls: bool
    scale_down: bool
    backups: int

    def check(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"a cluster needs at least one node, got {self.nodes}")
        if self.backups < 0:
            raise ValueError(f"backups must be 0 or more, got {self.backups}")
        if self.backups and self.scale_down:
            raise ValueError("scale_down and backups exclude each other: a node's messages either "
                             "stay in the store its standby takes over or move to a peer")


def start_cluster(
    directory: ClusterDir, impl: BrokerFlavor, shape: ClusterShape, timeout: float, say: Progress,
) -> float:
    """Create and start the cluster ``shape`` describes; return the seconds it took.

    Masters start first; standbys start once their masters hold the stores' locks. Waits until
    every master accepts logins, every standby waits for its lock, and the mesh is whole.
    """
    directory.check_usable()
    with directory.lock():
        previous = ClusterState.load(directory.dir)
        if previous is not None:
            alive = [n.name for n in previous.nodes if directory.is_running(n)]
            if alive:
                raise RuntimeError(
                    f"a cluster is already running in {directory.dir} ({', '.join(alive)} alive); "
                    "run 'clustermq cluster down' first"
                )
        state = _fresh_state(directory, impl, shape, say)
        started = time.monotonic()
        try:
            _start_nodes(directory, impl, state, started + timeout, say, started)
        except BaseException:
            stop_all(directory, state)
            raise
    return time.monotonic() - started


def _fresh_state(directory: ClusterDir, impl: BrokerFlavor, shape: ClusterShape, say: Progress) -> ClusterState:
    """The new cluster's state, saved, with the old node directories gone and the TLS files made."""
    home, version = impl.ensure_home(say)
    ports = node_ports(shape.nodes * (1 + shape.backups), shape.base_port)
    amqp = amqp_ports(len(ports), shape.base_port, ports)
    for old in directory.dir.glob("node*"):
        if old.is_dir() and NODE_DIR_NAME.fullmatch(old.name):
            shutil.rmtree(old)
    nodes = shape.nodes
    state = ClusterState(
        flavor=impl.name,
        version=version,
        home=str(home),
        username=shape.username,
        password=shape.password or new_password(),
        nodes=[
            NodeState(index=i, name=f"node{i % nodes}", host=HOST, stomp_port=stomp, peer_port=peer,
                      backup_of=None if i < nodes else i % nodes, amqp_port=amqp[i])
            for i, (stomp, peer) in enumerate(ports)
        ],
    )
    state.scale_down = shape.scale_down
    if shape.tls:
        say("generating a CA and a broker certificate with keytool")
        files = generate_cluster_tls(directory.dir / TLS_DIR, keystore_password(state.password))
        state.tls, state.ca_file, state.keystore = True, str(files.ca_pem), str(files.keystore)
    else:
        shutil.rmtree(directory.dir / TLS_DIR, ignore_errors=True)
    state.save(directory.dir)
    return state


def _start_nodes(
    directory: ClusterDir, impl: BrokerFlavor, state: ClusterState, deadline: float, say: Progress,
    started: float,
) -> None:
    for node in state.nodes:
        impl.render_config(state, node, directory.node_dir(node.index))
    masters = [n for n in state.nodes if n.backup_of is None]
    for node in masters:
        say(
            f"starting {impl.name} node {node.index} ({node.name}): "
            f"stomp {node.host}:{node.stomp_port}, peer port {node.peer_port}"
        )
        launch_node(directory, impl, state, node)
    state.save(directory.dir)
    wait_ready(directory, impl, state, [n.index for n in masters], deadline, say, started)
    # Standbys start after their masters hold the stores' locks.
    standbys = [n for n in state.nodes if n.backup_of is not None]
    for node in standbys:
        say(f"starting {impl.name} standby {node.index} of {node.name}: stomp {node.host}:{node.stomp_port}")
        launch_node(directory, impl, state, node)
    state.save(directory.dir)
    for node in standbys:
        wait_standby(directory, impl, state, node.index, deadline, say)
    wait_mesh(directory, impl, state, deadline, say, started)

