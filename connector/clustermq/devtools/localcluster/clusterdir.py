"""A local cluster's directory: where each node's config, log and marker live, the lock that
serialises changes, and the failure report that quotes a node's log.

Everything about a running cluster is recorded in ``<dir>/cluster.json`` so that ``status`` and
``down`` work from another process (the CLI in another terminal, or the next test run after a
crash); ``DIR/node<i>/`` holds a node's config, data, tmp and ``broker.log``. Objects hold no
state beyond the directory: every call reads ``cluster.json``, so several objects and processes
can share one cluster.
"""

from __future__ import annotations

import fcntl
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from clustermq.devtools.localcluster import process
from clustermq.devtools.localcluster.certificates import TLS_DIR
from clustermq.devtools.localcluster.state import STATE_FILE, ClusterState, NodeState

LOG_TAIL_LINES = 40
NODE_DIR_NAME = re.compile(r"node\d+")


class ClusterStartError(RuntimeError):
    """A node did not come up (or its peers did not connect) in time."""


class ClusterDir:
    """The directory of one local cluster, and what can be read from it without a flavor.

    The objects and functions that manage the cluster (start, waits, pairs) all work through
    one of these, so the directory's layout is known in one place.
    """

    def __init__(self, dir: Path | str) -> None:
        self.dir = Path(dir).expanduser().resolve()

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

    def log_size(self, index: int) -> int:
        """Where the node's log ends now (0 before its first start): the offset from which
        :meth:`log_since` reads what the node writes next."""
        path = self.log_path(index)
        return path.stat().st_size if path.exists() else 0

    def log_tail(self, index: int, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines the node's current process wrote to its log."""
        node = node_at(self.state(), index)
        text = self.log_since(index, node.log_offset)
        return "\n".join(text.splitlines()[-lines:])

    def marker(self, index: int) -> str:
        """The command-line marker of node ``index``'s broker (:mod:`.process`)."""
        return process.marker_arg(self.node_dir(index))

    def is_running(self, node: NodeState) -> bool:
        """Whether ``node``'s recorded process still runs (checked by pid and marker)."""
        return process.is_running(node.pid, self.marker(node.index))

    def check_usable(self) -> None:
        """Refuse to take over a non-empty directory that is not a cluster directory."""
        if self.dir.exists() and not self.exists:
            stray = [p.name for p in self.dir.iterdir()
                     if not NODE_DIR_NAME.fullmatch(p.name) and p.name not in (".lock", TLS_DIR)]
            if stray:
                raise RuntimeError(
                    f"{self.dir} is not empty and holds no {STATE_FILE}; refusing to use it "
                    f"for a cluster (found: {', '.join(sorted(stray)[:5])})"
                )

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Serialise state-changing operations on this directory across processes."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def log_since(self, index: int, offset: int) -> str:
        """The node's log from ``offset`` on: with the offset recorded at a start, only what the
        current process wrote (a restarted node's log still holds its earlier runs)."""
        try:
            with open(self.log_path(index), "rb") as handle:
                handle.seek(offset)
                return handle.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def failure(self, state: ClusterState, index: int, what: str) -> ClusterStartError:
        """The error for a node that did not come up, with the end of its log: the broker's own
        words are what tells a port clash from a bad config."""
        node = node_at(state, index)
        tail = "\n".join(self.log_since(index, node.log_offset).splitlines()[-LOG_TAIL_LINES:])
        return ClusterStartError(
            f"{what}\n--- last lines of {self.log_path(index)} ---\n{tail or '(empty)'}"
        )


def node_at(state: ClusterState, index: int) -> NodeState:
    """The node (or pair member) with ``index``; ``IndexError`` naming the cluster's range."""
    for node in state.nodes:
        if node.index == index:
            return node
    raise IndexError(f"no node {index}; the cluster has nodes 0..{len(state.nodes) - 1}")
