"""Which member of a failover pair is live and which is down (``cluster kill/start N`` on pairs).

A member's role is not recorded anywhere: the live one is the member that accepts a STOMP login
(a standby opens no transport until it holds the store's lock), so it is asked each time.
"""

from __future__ import annotations

import time

from clustermq.devtools.localcluster.clusterdir import ClusterDir
from clustermq.devtools.localcluster.failover_pairs import members
from clustermq.devtools.localcluster.flavor_registry import get_flavor


def live_member(directory: ClusterDir, logical: int, timeout: float = 0.0) -> int | None:
    """Index of the member of node ``logical`` that accepts logins, polling up to ``timeout``."""
    state = directory.state()
    impl = get_flavor(state.flavor)
    deadline = time.monotonic() + timeout
    while True:
        for node in members(state, logical):
            if directory.is_running(node) and impl.probe_ready(state, node, timeout=2.0).ok:
                return node.index
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)


def down_member(directory: ClusterDir, logical: int) -> int | None:
    """Index of a member of node ``logical`` whose process is not running."""
    for node in members(directory.state(), logical):
        if not directory.is_running(node):
            return node.index
    return None
