"""Telling a second delivery of a message from a message not seen yet, for Trigger.AvailableNow.

Why. AvailableNow reads the backlog measured at start and counts deliveries against it (a
network of brokers moves messages between nodes, so only a cluster-wide count works, see
consumer.py). A delivery of a message this process already received must not count: after a
killed consumer, a Classic network of brokers delivered one message twice (a copy bounced
between nodes), 5,600 deliveries held 5,599 messages, the drain ended, and the last message
stayed queued. A connection lost with planned messages also brings them again.

Bounded: a copy arrives within seconds of the original, so only the most recent ids are kept
and memory stays independent of the backlog's size (the backpressure guarantee).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

#: ids remembered; about 150 bytes each, some seconds of deliveries at full speed
RECENT_IDS = 50_000


class RecentIds:
    """The ids of the last ``capacity`` deliveries; inactive (remembering nothing) until
    :meth:`activate`, since only AvailableNow counts deliveries."""

    def __init__(self, capacity: int = RECENT_IDS) -> None:
        self.capacity = capacity
        self.active = False
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def activate(self) -> None:
        self.active = True

    def seen_before(self, key: str | None) -> bool:
        """Remember ``key``; True if it was delivered before (and not given back since)."""
        if not self.active or not key:
            return False
        with self._lock:
            if key in self._ids:
                self._ids.move_to_end(key)
                return True
            self._ids[key] = None
            if len(self._ids) > self.capacity:
                self._ids.popitem(last=False)
            return False

    def forget(self, keys: Iterable[str | None]) -> None:
        """Messages given back to the broker: their next delivery is not a copy."""
        if not self.active:
            return
        with self._lock:
            for key in keys:
                if key:
                    self._ids.pop(key, None)

    def __len__(self) -> int:
        return len(self._ids)
