"""``LocalCluster``: start, inspect, break and stop a cluster of brokers on this machine.

The connector is about *clusters*, so its tests need several real brokers wired together, and
they need to kill and restart single nodes. Everything about a running cluster is recorded in
``<dir>/cluster.json`` so that ``status``/``down`` work from another process (the CLI in another
terminal, or the next test session after a crash), and every broker is stopped by its recorded
pid, never by process name.
"""

from __future__ import annotations

import fcntl
import logging
import re
import secrets
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from clustermq.broker.nodes import Node, TlsSettings, format_nodes
from clustermq.devtools.localcluster import process
from clustermq.devtools.localcluster.flavor import BrokerFlavor, Progress, get_flavor
from clustermq.devtools.localcluster.ports import HOST, node_ports
from clustermq.devtools.localcluster.state import STATE_FILE, ClusterState, NodeState
from clustermq.devtools.localcluster.tls import TLS_DIR, generate_cluster_tls, keystore_password

DEFAULT_USERNAME = "clustermq"
READY_TIMEOUT = 90.0
STOP_GRACE = 30.0
LOG_TAIL_LINES = 40
_NODE_DIR = re.compile(r"node\d+")

log = logging.getLogger(__name__)


class Credentials(NamedTuple):
    """Login for every node of the cluster (clients and network bridges alike)."""

    username: str
    password: str


class ClusterStartError(RuntimeError):
    """A node did not come up (or its peers did not connect) in time."""


class LocalCluster:
    """A cluster of broker processes rooted at one directory.

    ``DIR/cluster.json`` holds the state, ``DIR/node<i>/`` a node's config, data, tmp and
    ``broker.log``. Instances hold no state of their own beyond the directory: every call reads
    ``cluster.json``, so several objects and processes can share one cluster.
    """

    def __init__(self, dir: Path | str) -> None:
        self.dir = Path(dir).expanduser().resolve()

    # ----------------------------------------------------------------- inspection

    @property
    def exists(self) -> bool:
        """Whether a cluster has been set up in this directory (running or not)."""
        return (self.dir / STATE_FILE).is_file()

    def state(self) -> ClusterState:
        """The recorded state; ``FileNotFoundError`` when no cluster was ever set up here."""
        state = ClusterState.load(self.dir)
        if state is None:
            raise FileNotFoundError(
                f"no local cluster in {self.dir} ({STATE_FILE} missing); run 'clustermq cluster up'"
            )
        return state

    def node_dir(self, index: int) -> Path:
        return self.dir / f"node{index}"

    def log_path(self, index: int) -> Path:
        return self.node_dir(index) / "broker.log"

    def nodes(self) -> tuple[Node, ...]:
        """The STOMP endpoints of all nodes, in node order.

        On a TLS cluster they are ``stomp+ssl`` nodes that trust the cluster's CA, so the depth
        probe and the load generator can use them as they are.
        """
        state = self.state()
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
                    "pid": node.pid if running else None,
                    "running": running,
                    "ready": bool(probe and probe.ok),
                    "detail": probe.reason if probe else "not running",
                    "log": str(self.log_path(node.index)),
                }
            )
        return rows

    def log_tail(self, index: int, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines the node's current process wrote to its log."""
        node = self._node(self.state(), index)
        text = self._log_since(index, node.log_offset)
        return "\n".join(text.splitlines()[-lines:])

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
    ) -> list[Node]:
        """Create and start a fresh cluster; return once every node accepts STOMP logins.

        With ``tls`` a new CA and a broker certificate signed by it are made in ``DIR/tls``
        (:mod:`.tls`, with keytool) and every node's STOMP port speaks only TLS; ``ca_file`` is
        then the CA to trust and ``brokers`` lists ``stomp+ssl://`` nodes.

        Previous node directories in ``dir`` are wiped (a new cluster has new ports and a new
        password). When the flavor can report bridge state, also waits until every node is
        connected to every other, so a message sent anywhere can be consumed anywhere. On any
        failure every node already started is stopped before the error propagates.
        """
        say = progress or log.info
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, got {nodes}")
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
            ports = node_ports(nodes, base_port)
            for old in self.dir.glob("node*"):
                if old.is_dir() and _NODE_DIR.fullmatch(old.name):
                    shutil.rmtree(old)
            state = ClusterState(
                flavor=impl.name,
                version=version,
                home=str(home),
                username=username,
                password=password or secrets.token_urlsafe(18),
                nodes=[
                    NodeState(index=i, name=f"node{i}", host=HOST, stomp_port=stomp, peer_port=peer)
                    for i, (stomp, peer) in enumerate(ports)
                ],
            )
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
                for node in state.nodes:
                    say(
                        f"starting {impl.name} node {node.index} ({node.name}): "
                        f"stomp {node.host}:{node.stomp_port}, peer port {node.peer_port}"
                    )
                    self._launch(impl, state, node)
                state.save(self.dir)
                deadline = started + timeout
                self._wait_ready(impl, state, [n.index for n in state.nodes], deadline, say, started)
                self._wait_mesh(impl, state, deadline, say, started)
            except BaseException:
                self._stop_all(state)
                raise
        say(f"cluster of {nodes} {impl.name} nodes up in {time.monotonic() - started:.1f} s")
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
            marker = self._marker(i)
            if not process.send_signal(node.pid, marker, sig):
                node.pid = None
                state.save(self.dir)
                return
            if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
                if not process.wait_exit(node.pid, marker, timeout):  # type: ignore[arg-type]
                    raise RuntimeError(f"node {i} (pid {node.pid}) still running {timeout:.0f} s after {signal.Signals(sig).name}")
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
                self._wait_ready(impl, state, [i], deadline, say, started)
                self._wait_mesh(impl, state, deadline, say, started, involving=i)
            except BaseException:
                process.stop(node.pid, self._marker(i), grace=5.0)
                node.pid = None
                state.save(self.dir)
                raise
            return time.monotonic() - started

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

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ----------------------------------------------------------------- internals

    def _marker(self, index: int) -> str:
        return process.marker_arg(self.node_dir(index))

    @staticmethod
    def _node(state: ClusterState, index: int) -> NodeState:
        for node in state.nodes:
            if node.index == index:
                return node
        raise IndexError(f"no node {index}; the cluster has nodes 0..{len(state.nodes) - 1}")

    def _check_dir_usable(self) -> None:
        """Refuse to take over a non-empty directory that is not a cluster directory."""
        if self.dir.exists() and not self.exists:
            stray = [p.name for p in self.dir.iterdir()
                     if not _NODE_DIR.fullmatch(p.name) and p.name not in (".lock", TLS_DIR)]
            if stray:
                raise RuntimeError(
                    f"{self.dir} is not empty and holds no {STATE_FILE}; refusing to use it "
                    f"for a cluster (found: {', '.join(sorted(stray)[:5])})"
                )

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """Serialise state-changing operations on this directory across processes."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _launch(self, impl: BrokerFlavor, state: ClusterState, node: NodeState) -> None:
        node_dir = self.node_dir(node.index)
        log_path = self.log_path(node.index)
        node.log_offset = log_path.stat().st_size if log_path.exists() else 0
        node.started_at = time.time()
        node.pid = process.launch(impl.command(state, node, node_dir), cwd=node_dir, log_path=log_path)

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

    def _log_since(self, index: int, offset: int) -> str:
        try:
            with open(self.log_path(index), "rb") as handle:
                handle.seek(offset)
                return handle.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def _failure(self, state: ClusterState, index: int, what: str) -> ClusterStartError:
        node = self._node(state, index)
        tail = "\n".join(self._log_since(index, node.log_offset).splitlines()[-LOG_TAIL_LINES:])
        return ClusterStartError(
            f"{what}\n--- last lines of {self.log_path(index)} ---\n{tail or '(empty)'}"
        )

    def _wait_ready(
        self,
        impl: BrokerFlavor,
        state: ClusterState,
        indices: list[int],
        deadline: float,
        say: Progress,
        started: float,
    ) -> None:
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
        if len(state.nodes) < 2:
            return
        names = {n.name for n in state.nodes}
        while True:
            missing: dict[int, set[str]] = {}
            for node in state.nodes:
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
