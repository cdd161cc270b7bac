"""Lag per node for the query's progress: what the reader holds, acknowledged, and what waits.

PySpark 4.2 lets a Python source report exactly one thing into a query's progress beyond its
offsets: ``reportLatestOffset``, shown as the source's ``latestOffset`` in ``lastProgress``.
The reader puts its lag there, per node: ``offset`` (the next offset it would number, what
``latestOffset`` means for Kafka), ``buffered`` (delivered, not yet in a committed batch),
``acknowledged`` (offsets below this are acknowledged), ``departed`` (1 while, with
``discovery=cluster``, the cluster no longer lists the node) and ``backlog`` (the queue's depth on the
broker node, delivered-but-unacknowledged messages included, as the broker counts it: a Classic network can
count a message on two nodes while a bridge moves it; left out until first measured).

The backlog needs a STOMP round trip per node, so a background thread measures it every
:data:`BACKLOG_INTERVAL_S` instead of Spark's trigger loop waiting for it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from clustermq.read.messages import NodeStatus

log = logging.getLogger("clustermq.lag")

#: seconds between two measurements of the queue's depth on every node
BACKLOG_INTERVAL_S = 10.0

DepthProbe = Callable[[], Mapping[str, "int | None"]]
NodeLag = dict[str, int]


class BacklogMonitor:
    """Measures the queue's depth per node in a daemon thread; the last answer is kept."""

    def __init__(self, probe: DepthProbe, interval_s: float = BACKLOG_INTERVAL_S) -> None:
        self._probe = probe
        self._interval_s = interval_s
        self._depths: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="clustermq-backlog", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                measured = self._probe()
            except Exception as exc:
                log.debug("backlog probe failed: %s", exc)
            else:
                with self._lock:
                    for node, depth in measured.items():
                        if depth is None:
                            self._depths.pop(node, None)
                        else:
                            self._depths[node] = depth
            self._stop.wait(self._interval_s)

    def depths(self) -> dict[str, int]:
        with self._lock:
            return dict(self._depths)

    def stop(self) -> None:
        self._stop.set()


def lag_report(status: Sequence[NodeStatus], backlog: Mapping[str, int]) -> dict[str, NodeLag]:
    """``{node: {"offset", "buffered", "acknowledged"[, "backlog"][, "paused"][, "disconnected"]}}``
    in node order; ``paused`` marks a node ``priorityNodes`` keeps this query from reading now."""
    report: dict[str, NodeLag] = {}
    for node in status:
        entry = {"offset": node.next_seq or 0, "buffered": node.buffered,
                 "acknowledged": node.acked_upto or 0}
        if node.node in backlog:
            entry["backlog"] = backlog[node.node]
        if node.departed:  # discovery=cluster: the cluster no longer lists it (membership.py)
            entry["departed"] = 1
        if node.paused:
            entry["paused"] = 1
        if not node.connected:
            entry["disconnected"] = 1
        report[node.node] = entry
    return report
