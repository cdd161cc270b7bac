"""A poll a test's Spark task can run (it imports only the connector): wait until a queue holds
a number of messages over all nodes, so that a sibling task has committed before this one fails."""

from __future__ import annotations

import time
from collections.abc import Mapping


def wait_for_depth(options: Mapping[str, str], depth: int, timeout_s: float = 120.0) -> None:
    """Block until the queue holds ``depth`` messages over all nodes (or ``timeout_s`` passed)."""
    from clustermq.broker.depth import queue_depth
    from clustermq.errors import DepthError
    from clustermq.options import WriteOptions

    parsed = WriteOptions.parse(dict(options))
    user, password = parsed.connection.login
    deadline = time.monotonic() + timeout_s
    while depth and time.monotonic() < deadline:
        try:
            if sum(queue_depth(n, parsed.connection.queue, user, password, timeout=10)
                   for n in parsed.connection.nodes) >= depth:
                return
        except DepthError:
            # Artemis once answered "Problem while retrieving attribute messageCount" during
            # such a wait (a node where the queue was being created, presumably): ask again.
            pass
        time.sleep(0.2)
