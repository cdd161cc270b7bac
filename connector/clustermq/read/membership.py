"""Nodes joining a running query (option ``discovery=cluster``).

Spark's Kafka source picks up new partitions when ``latestOffset`` runs; the counterpart here:
a background thread asks the cluster for its members every few seconds (one short STOMP
connection to a seed, :mod:`clustermq.broker.discovery`), connects a subscription to each new
node at once, and ``latestOffset`` admits the connected ones, so a new offset key (starting at
0) appears only at a batch boundary and every offset map Spark sees names the same nodes as
the consumer. Nodes are never removed while the query runs (their offset keys stay): a node
that left is one that is down (its unacknowledged messages are the broker's again), and a node
that did not answer a discovery may just be slow.

A node the cluster no longer lists and the query is not connected to has *departed*: its
subscription stops reconnecting (and saying so every few seconds) until a discovery lists it
again. Discovery cannot tell a graceful stop or an Artemis scale-down from a crash (a crashed
node leaves the topology too), so this is only safe because it is undone by the next discovery
that lists the node: a node that comes back is read from again under its old key. Seeds (the
``brokers`` the user named) never depart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from clustermq.broker.connection_options import ConnectionOptions
from clustermq.broker.discovery import REFRESH_INTERVAL_S, merged, published
from clustermq.broker.nodes import Node
from clustermq.errors import NodeUnavailable
from clustermq.read.subscription import NodeSubscription

log = logging.getLogger("clustermq.membership")


def first_connect(sub: NodeSubscription) -> NodeUnavailable | None:
    """A subscription's first connection, at the query's start or when its node joined: the
    error (naming the node and why), or ``None``. A failure is recorded so that its reconnect,
    in the background, counts "reconnected after N s" from this attempt."""
    try:
        sub.connect_once()
        return None
    except NodeUnavailable as exc:
        sub.last_error = str(exc)
        sub.lost_at = time.monotonic()
        return exc


class MembershipWatch:
    """Asks the cluster for its members every ``interval_s``; subscribes to new nodes
    (``subscription(node, index)`` makes one) until the consumer takes them."""

    def __init__(
        self,
        conn: ConnectionOptions,
        known: Callable[[], list[str]],
        subscription: Callable[[Node, int], NodeSubscription],
        seeds: tuple[Node, ...] = (),
        current: Callable[[], list[NodeSubscription]] = list,
        interval_s: float = REFRESH_INTERVAL_S,
    ) -> None:
        self._conn = conn
        self._seeds = {n.name for n in seeds}
        self._current = current  # the consumer's subscriptions (departures are marked there)
        self._known = known
        self._subscription = subscription
        self._lock = threading.Lock()
        self._joining: list[NodeSubscription] = []
        self._joined: list[str] = []  # every node this watch subscribed to, in index order
        self._interval_s = interval_s
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_refresh: float | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="clustermq-membership", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        for sub in self.take_joined():
            sub.stop()

    def take_joined(self) -> list[NodeSubscription]:
        """The subscriptions to joined nodes made since the last call."""
        with self._lock:
            joined, self._joining = self._joining, []
        return joined

    def _join(self, nodes: list[Node]) -> None:
        for node in nodes:
            with self._lock:
                index = len(set(self._known()) | set(self._joined))
                self._joined.append(node.name)
            sub = self._subscription(node, index)
            error = first_connect(sub)
            if error is not None:
                log.warning("clustermq: %s; reconnecting in the background", error)
            if self._stopping.is_set():  # the query stopped meanwhile
                sub.stop()
                return
            sub.start()
            with self._lock:
                self._joining.append(sub)

    def refresh(self) -> list[Node]:
        """One discovery; the nodes it found that the query does not read yet (joined); marks
        the departed ones."""
        listed = published(self._conn)
        self.last_refresh = time.monotonic()
        if listed is None:
            return []
        found = merged(tuple(self._conn.nodes), listed)
        with self._lock:
            known = set(self._known()) | set(self._joined)
        new = [node for node in found if node.name not in known]
        if new:
            log.info("clustermq: discovery found new node(s) %s; subscribing",
                     ", ".join(n.name for n in new))
            self._join(new)
        self._mark_departed({n.name for n in listed})
        return new

    def _mark_departed(self, listed: set[str]) -> None:
        for sub in self._current():
            name = sub.node.name
            gone = name not in listed and name not in self._seeds and not sub.connected
            if gone and not sub.departed:
                log.warning("clustermq: node %s departed: the cluster no longer lists it; not "
                            "reconnecting until it is listed again (its offset key stays)", name)
            elif sub.departed and not gone:
                log.warning("clustermq: node %s is listed again; reconnecting", name)
            sub.set_departed(gone)

    def _run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            try:
                self.refresh()
            except Exception as exc:  # never let a refresh end the thread
                log.warning("clustermq: cluster discovery failed: %s", exc)
