"""Arrival numbers and the AvailableNow target: how the reader knows it has read the backlog.

Every delivery to the reader process gets the next arrival number, whichever node it came
from; AvailableNow's target is counted in those numbers, not per node, because a network of
brokers moves messages between nodes and a per-node target could wait forever for a message
consumed on another node.
"""

from __future__ import annotations

import threading


class ArrivalCounter:
    """Numbers every delivery to this process, across nodes, and lets a caller wait for one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.value = 0

    def __next__(self) -> int:
        with self._cond:
            current = self.value
            self.value += 1
            self._cond.notify_all()
            return current

    def wait_for_change(self, seen: int, timeout: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self.value != seen, timeout)


class AvailableNowTarget:
    """What Trigger.AvailableNow may read: the backlog measured when the query started.

    Counted in arrivals (every delivery to this process gets the next arrival number), not per
    node: a network of brokers moves messages between nodes, so a per-node target could wait
    forever for a message that was consumed on another node.
    """

    def __init__(self, backlog: int) -> None:
        self.limit = backlog
        self.final = False
        self.recounted = False

    def add_returned(self, count: int) -> None:
        """Messages given back after a lost connection will arrive a second time."""
        if not self.final:
            self.limit += count
