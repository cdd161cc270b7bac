"""``LocalCluster``: start, inspect, break and stop a cluster of brokers on this machine.

The connector is about *clusters*, so its tests need several real brokers wired together, and
they need to kill and restart single nodes. The cluster's state is recorded in its directory
(:mod:`.clusterdir`) so that another process can inspect or stop it, and every broker is stopped
by its recorded pid, never by process name.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import signal
import time
from typing import Any, NamedTuple

from clustermq.broker.nodes import Node, TlsSettings, format_nodes
from clustermq.devtools.localcluster import process
from clustermq.devtools.localcluster.clusterdir import NODE_DIR_NAME
from clustermq.devtools.localcluster.flavor import Progress
from clustermq.devtools.localcluster.flavors import get_flavor
from clustermq.devtools.localcluster.joining import Joining
from clustermq.devtools.localcluster.paircontrol import PairControl
from clustermq.devtools.localcluster.pairs import client_nodes, is_paired, logical_index
from clustermq.devtools.localcluster.ports import HOST, amqp_ports, node_ports
from clustermq.devtools.localcluster.readiness import READY_TIMEOUT
from clustermq.devtools.localcluster.state import ClusterState, NodeState
from clustermq.devtools.localcluster.tls import TLS_DIR, generate_cluster_tls, keystore_password

DEFAULT_USERNAME = "clustermq"
STOP_GRACE = 30.0

log = logging.getLogger(__name__)


class Credentials(NamedTuple):
    """Login for every node of the cluster (clients and network bridges alike)."""

    username: str
    password: str


class LocalCluster(Joining, PairControl):
    """A cluster of broker processes rooted at one directory (layout: :class:`.ClusterDir`)."""

    # ----------------------------------------------------------------- inspection

    def nodes(self) -> tuple[Node, ...]:
        """The STOMP endpoints of all nodes, in node order.

        On a TLS cluster they are ``stomp+ssl`` nodes that trust the cluster's CA, so the depth
        probe and the load generator can use them as they are. A failover pair is one node, a
        ``masterslave:(...)`` group of its members.
        """
        state = self.state()
        if is_paired(state):
            return client_nodes(state)
        tls = TlsSettings(ca_file=state.ca_file) if state.tls else None
        return tuple(
            Node(host=n.host, port=n.stomp_port, ssl=state.tls, tls=tls) for n in state.nodes
        )

    @property
    def tls(self) -> bool:
        """Whether the nodes speak STOMP over TLS (``up(tls=True)``)."""
        return self.state().tls

    @property
    def ca_file(self) -> str | None:
        """The PEM file of the CA that signed the brokers' certificate (option ``sslCaFile``)."""
        state = self.state()
        return state.ca_file if state.tls else None

    @property
    def brokers(self) -> str:
        """The connector's ``brokers`` option value for this cluster."""
        return format_nodes(self.nodes())

    @property
    def amqp_brokers(self) -> str:
        """The reader's ``amqpBrokers`` option value: every node's AMQP port, as in ``brokers``."""
        return format_nodes(client_nodes(self.state(), amqp=True))

    @property
    def credentials(self) -> Credentials:
        state = self.state()
        return Credentials(state.username, state.password)

    @property
    def flavor(self) -> str:
        return self.state().flavor

    def is_running(self, index: int) -> bool:
        node = self._node(self.state(), index)
        return process.is_running(node.pid, self._marker(index))

    def status(self) -> list[dict[str, Any]]:
        """One dict per node: ports, pid, whether the process runs and accepts STOMP logins."""
        state = self.state()
        flavor = get_flavor(state.flavor)
        rows = []
        for node in state.nodes:
            running = process.is_running(node.pid, self._marker(node.index))
            probe = flavor.probe_ready(state, node, timeout=2.0) if running else None
            rows.append(
                {
                    "index": node.index,
                    "name": node.name,
                    "stomp": f"{node.host}:{node.stomp_port}",
                    "peer_port": node.peer_port,
                    "amqp_port": node.amqp_port,
                    "pid": node.pid if running else None,
                    "running": running,
                    "ready": bool(probe and probe.ok),
                    "detail": probe.reason if probe else "not running",
                    "log": str(self.log_path(node.index)),
                    "pair": logical_index(node),
                    "role": "live" if probe and probe.ok else ("standby" if running else "down"),
                }
            )
        return rows

    def jms_client(self, index: int, role: str, queue: str, count: int, **options: Any) -> list[str]:
        """argv of the distribution's own JMS ``role`` ("producer"/"consumer") on node ``index``
        (options: :meth:`BrokerFlavor.jms_client`)."""
        state = self.state()
        work = self.dir / "jms-clients"
        work.mkdir(exist_ok=True)
        return get_flavor(state.flavor).jms_client(state, self._node(state, index), role, queue,
                                                   count, work=work, **options)

    # ----------------------------------------------------------------- lifecycle

    def up(
        self,
        nodes: int = 3,
        flavor: str = "classic",
        base_port: int | None = None,
        username: str = DEFAULT_USERNAME,
        password: str | None = None,
        timeout: float = READY_TIMEOUT,
        progress: Progress | None = None,
        tls: bool = False,
        scale_down: bool = False,
        backups: int = 0,
    ) -> list[Node]:
        """Create and start a fresh cluster; return once every node accepts STOMP logins.

        With ``tls`` a new CA and a broker certificate signed by it are made in ``DIR/tls``
        (:mod:`.tls`, with keytool) and every node's STOMP port speaks only TLS; ``ca_file`` is
        then the CA to trust and ``brokers`` lists ``stomp+ssl://`` nodes.

        Previous node directories in ``dir`` are wiped (a new cluster has new ports and a new
        password). When the flavor can report bridge state, also waits until every node is
        connected to every other, so a message sent anywhere can be consumed anywhere. On any
        failure every node already started is stopped before the error propagates.

        With ``backups`` every node is a failover pair: that many standby members share its store
        (:mod:`.pairs`); they start once the masters are up, and wait for the store's lock.
        """
        say = progress or log.info
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, got {nodes}")
        if backups < 0:
            raise ValueError(f"backups must be 0 or more, got {backups}")
        if backups and scale_down:
            raise ValueError("scale_down and backups exclude each other: a node's messages either "
                             "stay in the store its standby takes over or move to a peer")
        impl = get_flavor(flavor)
        if password is not None and not password:
            raise ValueError("password must not be empty")
        self._check_dir_usable()
        with self._lock():
            previous = ClusterState.load(self.dir)
            if previous is not None:
                alive = [n.name for n in previous.nodes if process.is_running(n.pid, self._marker(n.index))]
                if alive:
                    raise RuntimeError(
                        f"a cluster is already running in {self.dir} ({', '.join(alive)} alive); "
                        "run 'clustermq cluster down' first"
                    )
            home, version = impl.ensure_home(say)
            ports = node_ports(nodes * (1 + backups), base_port)
            amqp = amqp_ports(len(ports), base_port, ports)
            for old in self.dir.glob("node*"):
                if old.is_dir() and NODE_DIR_NAME.fullmatch(old.name):
                    shutil.rmtree(old)
            state = ClusterState(
                flavor=impl.name,
                version=version,
                home=str(home),
                username=username,
                password=password or secrets.token_urlsafe(18),
                nodes=[
                    NodeState(index=i, name=f"node{i % nodes}", host=HOST, stomp_port=stomp, peer_port=peer,
                              backup_of=None if i < nodes else i % nodes, amqp_port=amqp[i])
                    for i, (stomp, peer) in enumerate(ports)
                ],
            )
            state.scale_down = scale_down
            if tls:
                say("generating a CA and a broker certificate with keytool")
                files = generate_cluster_tls(self.dir / TLS_DIR, keystore_password(state.password))
                state.tls, state.ca_file, state.keystore = True, str(files.ca_pem), str(files.keystore)
            else:
                shutil.rmtree(self.dir / TLS_DIR, ignore_errors=True)
            state.save(self.dir)
            started = time.monotonic()
            try:
                for node in state.nodes:
                    impl.render_config(state, node, self.node_dir(node.index))
                masters = [n for n in state.nodes if n.backup_of is None]
                for node in masters:
                    say(
                        f"starting {impl.name} node {node.index} ({node.name}): "
                        f"stomp {node.host}:{node.stomp_port}, peer port {node.peer_port}"
                    )
                    self._launch(impl, state, node)
                state.save(self.dir)
                deadline = started + timeout
                self._wait_ready(impl, state, [n.index for n in masters], deadline, say, started)
                # Standbys start after their masters hold the stores' locks.
                for node in state.nodes:
                    if node.backup_of is not None:
                        say(f"starting {impl.name} standby {node.index} of {node.name}: stomp {node.host}:{node.stomp_port}")
                        self._launch(impl, state, node)
                state.save(self.dir)
                for node in state.nodes:
                    if node.backup_of is not None:
                        self.wait_standby(node.index, deadline, say)
                self._wait_mesh(impl, state, deadline, say, started)
            except BaseException:
                self._stop_all(state)
                raise
        say(f"cluster of {nodes} {impl.name} nodes{f' (pairs of 1+{backups})' if backups else ''} up in {time.monotonic() - started:.1f} s")
        return list(self.nodes())

    def down(self, grace: float = STOP_GRACE) -> None:
        """Stop every node (SIGTERM, then SIGKILL after ``grace`` s). Idempotent.

        Data directories are kept; the next ``up`` replaces them.
        """
        state = ClusterState.load(self.dir)
        if state is None:
            return
        with self._lock():
            state = ClusterState.load(self.dir) or state
            self._stop_all(state, grace)

    def kill_node(self, i: int, sig: int = signal.SIGKILL, timeout: float = STOP_GRACE) -> None:
        """Send ``sig`` to node ``i``'s broker and, for terminating signals, wait until it is gone.

        SIGKILL (the default) simulates a crash: the broker gets no chance to close its store,
        and persisted messages must come back after ``start_node``.
        """
        self.state()  # fail before creating anything when there is no cluster here
        with self._lock():
            state = self.state()
            node = self._node(state, i)
            marker, pid = self._marker(i), node.pid
            if pid is None or not process.send_signal(pid, marker, sig):
                node.pid = None
                state.save(self.dir)
                return
            if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
                if not process.wait_exit(pid, marker, timeout):
                    raise RuntimeError(f"node {i} (pid {pid}) still running {timeout:.0f} s after "
                                       f"{signal.Signals(sig).name}")
                node.pid = None
                state.save(self.dir)

    def start_node(self, i: int, timeout: float = READY_TIMEOUT, progress: Progress | None = None) -> float:
        """Restart a stopped node with its old ports, config and data; return seconds to ready.

        Waits until it accepts STOMP logins and, where the flavor can tell, until the mesh is
        whole again (its bridges to the peers and theirs to it).
        """
        say = progress or log.info
        self.state()  # fail before creating anything when there is no cluster here
        with self._lock():
            state = self.state()
            impl = get_flavor(state.flavor)
            node = self._node(state, i)
            if process.is_running(node.pid, self._marker(i)):
                raise RuntimeError(f"node {i} is already running (pid {node.pid})")
            started = time.monotonic()
            say(f"starting {impl.name} node {i} ({node.name}): stomp {node.host}:{node.stomp_port}")
            self._launch(impl, state, node)
            state.save(self.dir)
            deadline = started + timeout
            try:
                if is_paired(state):  # a pair member comes back as standby (or live if alone)
                    self.wait_standby(i, deadline, say)
                else:
                    self._wait_ready(impl, state, [i], deadline, say, started)
                    self._wait_mesh(impl, state, deadline, say, started, involving=i)
            except BaseException:
                process.stop(node.pid, self._marker(i), grace=5.0)
                node.pid = None
                state.save(self.dir)
                raise
            return time.monotonic() - started

    def stop_node(self, i: int, grace: float = STOP_GRACE) -> None:
        """Stop node ``i`` gracefully (SIGTERM: the broker shuts down as an operator's stop
        does; an Artemis node with scale-down hands its messages to a peer first)."""
        self.kill_node(i, sig=signal.SIGTERM, timeout=grace)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ----------------------------------------------------------------- internals

    def _stop_all(self, state: ClusterState, grace: float = STOP_GRACE) -> None:
        """SIGTERM every live node at once, then wait for each (SIGKILL on overrun)."""
        for node in state.nodes:
            process.send_signal(node.pid, self._marker(node.index), signal.SIGTERM)
        deadline = time.monotonic() + grace
        errors = []
        for node in state.nodes:
            try:
                process.stop(node.pid, self._marker(node.index), grace=max(0.0, deadline - time.monotonic()))
            except RuntimeError as exc:  # pragma: no cover - SIGKILL always works on Linux
                errors.append(str(exc))
                continue
            node.pid = None
        state.save(self.dir)
        if errors:
            raise RuntimeError("; ".join(errors))
