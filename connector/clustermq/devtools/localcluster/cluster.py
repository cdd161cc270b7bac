"""``LocalCluster``: start, inspect, break and stop a cluster of brokers on this machine.

The connector is about *clusters*, so its tests need several real brokers wired together, and
they need to kill and restart single nodes. The cluster's state is recorded in its directory
(:mod:`.clusterdir`) so that another process can inspect or stop it, and every broker is stopped
by its recorded pid, never by process name.

``LocalCluster`` is the one object tests, the CLI, the demo and the bench hold; each of its jobs
is done by a module of its own: starting a fresh cluster (:mod:`.startup`), node processes
(:mod:`.node_processes`), waits (:mod:`.readiness`), joining (:mod:`.joining`) and the roles of
a failover pair's members (:mod:`.member_roles`).
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import Any, NamedTuple

from clustermq.broker.nodes import Node, TlsSettings, format_nodes
from clustermq.devtools.localcluster import process
from clustermq.devtools.localcluster.broker_flavor import JmsClientRun, Progress
from clustermq.devtools.localcluster.clusterdir import LOG_TAIL_LINES, ClusterDir, node_at
from clustermq.devtools.localcluster.failover_pairs import client_nodes, is_paired, logical_index
from clustermq.devtools.localcluster.flavor_registry import get_flavor
from clustermq.devtools.localcluster.joining import join_node
from clustermq.devtools.localcluster.member_roles import down_member, live_member
from clustermq.devtools.localcluster.node_processes import STOP_GRACE, launch_node, stop_all
from clustermq.devtools.localcluster.readiness import READY_TIMEOUT, wait_mesh, wait_ready, wait_standby
from clustermq.devtools.localcluster.startup import ClusterShape, start_cluster
from clustermq.devtools.localcluster.state import ClusterState

DEFAULT_USERNAME = "clustermq"

log = logging.getLogger(__name__)


class Credentials(NamedTuple):
    """Login for every node of the cluster (clients and network bridges alike)."""

    username: str
    password: str


class LocalCluster:
    """A cluster of broker processes rooted at one directory (layout: :class:`.ClusterDir`)."""

    def __init__(self, dir: Path | str) -> None:
        self._dir = ClusterDir(dir)
        self.dir = self._dir.dir

    # ----------------------------------------------------------------- the directory

    @property
    def exists(self) -> bool:
        """Whether a cluster has been set up in this directory (running or not)."""
        return self._dir.exists

    def state(self) -> ClusterState:
        """The recorded state; ``FileNotFoundError`` when no cluster was ever set up here."""
        return self._dir.state()

    def node_dir(self, index: int) -> Path:
        return self._dir.node_dir(index)

    def log_path(self, index: int) -> Path:
        return self._dir.log_path(index)

    def log_size(self, index: int) -> int:
        """Where the node's log ends now: an offset for :meth:`log_since`."""
        return self._dir.log_size(index)

    def log_tail(self, index: int, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines the node's current process wrote to its log."""
        return self._dir.log_tail(index, lines)

    def log_since(self, index: int, offset: int) -> str:
        """The node's log from byte ``offset`` on (``NodeState.log_offset``: its current run)."""
        return self._dir.log_since(index, offset)


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
        return self._dir.is_running(node_at(self.state(), index))

    def status(self) -> list[dict[str, Any]]:
        """One dict per node: ports, pid, whether the process runs and accepts STOMP logins."""
        state = self.state()
        flavor = get_flavor(state.flavor)
        rows = []
        for node in state.nodes:
            running = self._dir.is_running(node)
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
        (options: :class:`JmsClientRun`)."""
        state = self.state()
        if state.password.startswith("-"):
            raise ValueError("the brokers' JMS command-line clients take a --password value that "
                             "starts with '-' for an option: start the cluster with another password")
        work = self.dir / "jms-clients"
        work.mkdir(exist_ok=True)
        run = JmsClientRun(role, queue, count, work, **options)
        return get_flavor(state.flavor).jms_client(state, node_at(state, index), run)

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
        (:mod:`.certificates`, with keytool) and every node's STOMP port speaks only TLS;
        ``ca_file`` is then the CA to trust and ``brokers`` lists ``stomp+ssl://`` nodes.

        Previous node directories in ``dir`` are wiped (a new cluster has new ports and a new
        password). When the flavor can report bridge state, also waits until every node is
        connected to every other, so a message sent anywhere can be consumed anywhere. On any
        failure every node already started is stopped before the error propagates.

        With ``backups`` every node is a failover pair: that many standby members share its store
        (:mod:`.failover_pairs`); they start once the masters are up, and wait for the store's lock.
        """
        say = progress or log.info
        shape = ClusterShape(nodes=nodes, base_port=base_port, username=username, password=password,
                             tls=tls, scale_down=scale_down, backups=backups)
        shape.check()
        impl = get_flavor(flavor)
        if password is not None and not password:
            raise ValueError("password must not be empty")
        seconds = start_cluster(self._dir, impl, shape, timeout, say)
        say(f"cluster of {nodes} {impl.name} nodes{f' (pairs of 1+{backups})' if backups else ''} up in {seconds:.1f} s")
        return list(self.nodes())

    def down(self, grace: float = STOP_GRACE) -> None:
        """Stop every node (SIGTERM, then SIGKILL after ``grace`` s). Idempotent.

        Data directories are kept; the next ``up`` replaces them.
        """
        state = ClusterState.load(self.dir)
        if state is None:
            return
        with self._dir.lock():
            state = ClusterState.load(self.dir) or state
            stop_all(self._dir, state, grace)

    def kill_node(self, i: int, sig: int = signal.SIGKILL, timeout: float = STOP_GRACE) -> None:
        """Send ``sig`` to node ``i``'s broker and, for terminating signals, wait until it is gone.

        SIGKILL (the default) simulates a crash: the broker gets no chance to close its store,
        and persisted messages must come back after ``start_node``.
        """
        self.state()  # fail before creating anything when there is no cluster here
        with self._dir.lock():
            state = self.state()
            node = node_at(state, i)
            marker, pid = self._dir.marker(i), node.pid
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

    def dump_threads(self, note: str) -> list[int]:
        """Have every running node print its threads' stacks into its ``broker.log``, after a
        line with ``note``; the indexes of the nodes that did.

        For a node that stopped answering: taken the moment a test fails (tests/conftest.py),
        the dump shows where each thread of the node stood. SIGQUIT makes a HotSpot JVM print
        the dump to its standard output, which is the node's log, and run on.
        """
        state = self.state()
        dumped = []
        for node in state.nodes:
            if not self._dir.is_running(node):
                continue
            with self.log_path(node.index).open("a") as log:
                log.write(f"\n{note}\n")
            if process.send_signal(node.pid, self._dir.marker(node.index), signal.SIGQUIT):
                dumped.append(node.index)
        return dumped

    def start_node(self, i: int, timeout: float = READY_TIMEOUT, progress: Progress | None = None) -> float:
        """Restart a stopped node with its old ports, config and data; return seconds to ready.

        Waits until it accepts STOMP logins and, where the flavor can tell, until the mesh is
        whole again (its bridges to the peers and theirs to it).
        """
        say = progress or log.info
        self.state()  # fail before creating anything when there is no cluster here
        with self._dir.lock():
            state = self.state()
            impl = get_flavor(state.flavor)
            node = node_at(state, i)
            if self._dir.is_running(node):
                raise RuntimeError(f"node {i} is already running (pid {node.pid})")
            started = time.monotonic()
            say(f"starting {impl.name} node {i} ({node.name}): stomp {node.host}:{node.stomp_port}")
            launch_node(self._dir, impl, state, node)
            state.save(self.dir)
            deadline = started + timeout
            try:
                if is_paired(state):  # a pair member comes back as standby (or live if alone)
                    wait_standby(self._dir, impl, state, i, deadline, say)
                else:
                    wait_ready(self._dir, impl, state, [i], deadline, say, started)
                    wait_mesh(self._dir, impl, state, deadline, say, started, involving=i)
            except BaseException:
                process.stop(node.pid, self._dir.marker(i), grace=5.0)
                node.pid = None
                state.save(self.dir)
                raise
            return time.monotonic() - started

    def stop_node(self, i: int, grace: float = STOP_GRACE) -> None:
        """Stop node ``i`` gracefully (SIGTERM: the broker shuts down as an operator's stop
        does; an Artemis node with scale-down hands its messages to a peer first)."""
        self.kill_node(i, sig=signal.SIGTERM, timeout=grace)

    def add_node(self, timeout: float = READY_TIMEOUT, progress: Progress | None = None) -> Node:
        """Start one more node that joins the running cluster; return its STOMP endpoint
        (:func:`.joining.join_node` says how it joins)."""
        join_node(self._dir, timeout, progress or log.info)
        return self.nodes()[-1]

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ----------------------------------------------------------------- failover pairs

    def live_member(self, logical: int, timeout: float = 0.0) -> int | None:
        """Index of the member of node ``logical`` that accepts logins, polling up to ``timeout``."""
        return live_member(self._dir, logical, timeout)

    def down_member(self, logical: int) -> int | None:
        """Index of a member of node ``logical`` whose process is not running."""
        return down_member(self._dir, logical)

    def kill_live(self, logical: int) -> int:
        """SIGKILL the live member of node ``logical``; return its member index."""
        index = self.live_member(logical)
        if index is None:
            raise RuntimeError(f"node {logical} has no live member")
        self.kill_node(index)
        return index

    def start_standby(self, logical: int, timeout: float = READY_TIMEOUT, progress: Progress | None = None) -> int:
        """Restart the stopped member of node ``logical`` (it comes back as standby); return its index."""
        index = self.down_member(logical)
        if index is None:
            raise RuntimeError(f"every member of node {logical} is running")
        self.start_node(index, timeout=timeout, progress=progress)
        return index
