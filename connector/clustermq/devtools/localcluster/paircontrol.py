"""Killing and restarting a failover pair's members by role (``cluster kill/start N`` on pairs)."""

from __future__ import annotations

import time

from clustermq.devtools.localcluster import process
from clustermq.devtools.localcluster.clusterdir import ClusterDir
from clustermq.devtools.localcluster.flavor import Progress
from clustermq.devtools.localcluster.flavors import get_flavor
from clustermq.devtools.localcluster.pairs import STANDBY_LINE, members
from clustermq.devtools.localcluster.readiness import READY_TIMEOUT


class PairControl(ClusterDir):
    """Finding, killing and restarting a node's members by role (live, standby, down)."""

    def live_member(self, logical: int, timeout: float = 0.0) -> int | None:
        """Index of the member of node ``logical`` that accepts logins, polling up to ``timeout``."""
        state = self.state()
        impl = get_flavor(state.flavor)
        deadline = time.monotonic() + timeout
        while True:
            for node in members(state, logical):
                running = process.is_running(node.pid, self._marker(node.index))
                if running and impl.probe_ready(state, node, timeout=2.0).ok:
                    return node.index
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.2)

    def down_member(self, logical: int) -> int | None:
        """Index of a member of node ``logical`` whose process is not running."""
        state = self.state()
        for node in members(state, logical):
            if not process.is_running(node.pid, self._marker(node.index)):
                return node.index
        return None

    def wait_standby(self, index: int, deadline: float, say: Progress) -> None:
        """Wait until member ``index`` logs that it waits for the store's lock (or went live)."""
        state = self.state()
        node = self._node(state, index)
        impl = get_flavor(state.flavor)
        while True:
            if not process.is_running(node.pid, self._marker(index)):
                raise self._failure(state, index, f"member {index} ({node.name}) exited during start-up")
            if STANDBY_LINE.search(self._log_since(index, node.log_offset)):
                say(f"member {index} of {node.name} waits as standby")
                return
            if impl.probe_ready(state, node, timeout=1.0).ok:
                say(f"member {index} of {node.name} is live")
                return
            if time.monotonic() >= deadline:
                raise self._failure(state, index, f"member {index} ({node.name}) neither standby nor live")
            time.sleep(0.25)

    def kill_live(self, logical: int) -> int:
        """SIGKILL the live member of node ``logical``; return its member index."""
        index = self.live_member(logical)
        if index is None:
            raise RuntimeError(f"node {logical} has no live member")
        self.kill_node(index)  # type: ignore[attr-defined]
        return index

    def start_standby(self, logical: int, timeout: float = READY_TIMEOUT, progress: Progress | None = None) -> int:
        """Restart the stopped member of node ``logical`` (it comes back as standby); return its index."""
        index = self.down_member(logical)
        if index is None:
            raise RuntimeError(f"every member of node {logical} is running")
        self.start_node(index, timeout=timeout, progress=progress)  # type: ignore[attr-defined]
        return index
