"""Telling a copy: a delivery of a message this reader process already received.

Two promises, which the Delta sink's direct append builds on (pipelines/direct_append.py): in a
batch, at most one row per ``message_id`` is unflagged (:func:`flag_repeats`, exact); and a
message received again within the last ``RECENT_IDS`` deliveries of the run is flagged
(:class:`RecentIds`, bounded).

A Classic network of brokers can deliver one message twice with the same ``message_id`` and
neither copy flagged ``redelivered`` (a failed bridge sends again what it had not seen
acknowledged; a restarted node forgets the flag: docs/broker-behaviour.md, "Copies made by a
failed bridge"). A sink that checks only flagged rows against what it wrote would keep both,
so the reader flags such a copy itself (JMS's meaning of ``JMSRedelivered``: the message may
have been delivered before), and AvailableNow counts it as one more arrival to read
(read/available_now.py).

Bounded: a copy arrives within seconds of the original, so only the most recent ids are kept
and memory stays independent of the backlog's size (the backpressure guarantee). A copy that
comes later than the window, or in another run of the query, is not told; ``queue_to_delta
--dedupe all`` checks every row against the table for queues where that matters.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from clustermq.read.messages import BufferedMessage

#: message ids remembered to tell a copy: about 150 bytes each (7.5 MB), two seconds of
#: deliveries at the reader's full speed, the whole of a slower stream's last minutes
RECENT_IDS = 50_000


class RecentIds:
    """The ids of the last ``capacity`` deliveries to this process, across nodes."""

    def __init__(self, capacity: int = RECENT_IDS) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def seen_before(self, key: str | None) -> bool:
        """Remember ``key``; True if it was delivered before (and not given back since)."""
        if not key:
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
        """Messages given back to the broker before Spark planned them: they reached no sink, so
        their next delivery is not a copy."""
        with self._lock:
            for key in keys:
                if key:
                    self._ids.pop(key, None)

    def __len__(self) -> int:
        return len(self._ids)


def flag_repeats(batch: Iterable[tuple[str | None, BufferedMessage]]) -> int:
    """Flag every message of a batch whose key an earlier one of the batch has: exact, whatever
    the window, since Spark plans a batch in this process. ``batch`` pairs each message with its
    key (``message_id``); returns how many were flagged here."""
    seen: set[str] = set()
    flagged = 0
    for key, message in batch:
        if not key:
            continue
        if key in seen:
            if not message.copy:
                message.copy = True
                flagged += 1
        else:
            seen.add(key)
    return flagged
