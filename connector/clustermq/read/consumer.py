"""The driver-side consumer of the whole cluster: one subscription per node, offsets, acks.

Spark's Kafka source splits offset bookkeeping (``KafkaOffsetReader``) from the micro-batch
stream; this is the clustermq counterpart of the offset reader. It is created lazily in the
long-lived reader process and never pickled.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from clustermq.broker.dialect import BrokerDialect
from clustermq.broker.discovery import with_discovered
from clustermq.broker.nodes import Node
from clustermq.broker.pattern_check import check_queue_patterns
from clustermq.broker.reachability import no_node_reachable
from clustermq.broker.selector_check import check_selector
from clustermq.errors import NodeUnavailable, NoNodeReachable
from clustermq.options import ReadOptions
from clustermq.read.available_now import ArrivalCounter, AvailableNow, DepthProbe
from clustermq.read.copies import RecentIds, flag_repeats
from clustermq.read.links import LinkOpener
from clustermq.read.membership import MembershipWatch, first_connect
from clustermq.read.messages import BufferedMessage, NodeStatus
from clustermq.read.offsets import NodeOffsets, allocate, make_offsets
from clustermq.read.priority import connect_order, follow_priority, subscription_class
from clustermq.read.stalls import StallWatch
from clustermq.read.subscription import NodeSubscription, open_transport_link

log = logging.getLogger("clustermq.consumer")


class ClusterConsumer:
    """Competing consumer on every node; numbering, admission control and acknowledgement."""

    def __init__(self, options: ReadOptions, *, open_link: LinkOpener = open_transport_link) -> None:
        self._open_link = open_link
        self._membership: MembershipWatch | None = None
        if options.discovery == "cluster":
            seeds, conn = options.connection.nodes, with_discovered(options.connection)
            partitions = len(conn.nodes) if options.partitions_per_node else options.num_partitions
            options = dataclasses.replace(options, connection=conn, num_partitions=partitions)
            self._membership = MembershipWatch(options.connection, lambda: self.node_names,
                                               self._subscription, seeds, lambda: self.subscriptions)
        self.options = options
        self._arrivals = ArrivalCounter()
        self._recent = RecentIds()
        self._drain: AvailableNow | None = None  # Trigger.AvailableNow's, once prepared
        self._stalls: StallWatch | None = None  # a running query's, once watch_stalls is called
        self.subscriptions = [self._subscription(n, i) for i, n in enumerate(options.connection.nodes)]
        self._started = False
        self._all_down_since: float | None = None

    @property
    def node_names(self) -> list[str]:
        return [s.node.name for s in self.subscriptions]

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Connect to every node at once; fail only if none answers."""
        if self._started:
            return
        check_queue_patterns(self.options.connection,
                             f"to check the queue patterns of '{self.options.connection.queue_names}'")
        if self.options.selector:
            check_selector(self.options.connection, self.options.selector,
                           f"to check the selector for queue '{self.options.connection.queue_names}'")
        errors: list[NodeUnavailable] = []
        for wave in connect_order(self.subscriptions):  # priorityNodes first, see priority.py
            with ThreadPoolExecutor(max_workers=len(wave)) as pool:
                errors += [r for r in pool.map(first_connect, wave) if r is not None]
        if not any(s.connected for s in self.subscriptions):
            for sub in self.subscriptions:
                sub.stop()
            raise no_node_reachable(f"to start reading queue '{self.options.connection.queue_names}'", errors)
        for error in errors:
            log.warning("clustermq: %s; reconnecting in the background", error)
        for sub in self.subscriptions:
            sub.start()
        self._started = True
        if self._membership is not None:
            self._membership.start()

    def _subscription(self, node: Node, index: int) -> NodeSubscription:
        return subscription_class(self.options, node)(node, index, self.options, self._arrivals,
                                                      self._returned, self._recent,
                                                      open_link=self._open_link)

    def admit(self) -> list[str]:
        """Read from the nodes that joined since the last call, from the next batch on (their
        offsets start at 0); return their names."""
        joined = self._membership.take_joined() if self._membership is not None else []
        self.subscriptions.extend(joined)
        return [sub.node.name for sub in joined]

    def stop(self) -> None:
        if self._membership is not None:
            self._membership.stop()
        for sub in self.subscriptions:
            sub.stop()

    def check_reachable(self) -> None:
        """Fail the query once no node has been connected for ``noNodeTimeout``."""
        if any(s.connected for s in self.subscriptions):
            self._all_down_since = None
            return
        now = time.monotonic()
        if self._all_down_since is None:
            self._all_down_since = now
        elif now - self._all_down_since > self.options.no_node_timeout_s:
            reasons = "; ".join(f"{s.node.name}: {s.last_error}" for s in self.subscriptions)
            raise NoNodeReachable(
                f"clustermq: no broker node reachable for {self.options.no_node_timeout_s:.0f} s "
                f"(option noNodeTimeout): {reasons}"
            )

    # ------------------------------------------------------------------ offsets
    def set_start(self, start: Mapping[str, int]) -> None:
        for sub in self.subscriptions:
            sub.set_base(start[sub.node.name])

    def acknowledge(self, committed: Mapping[str, int]) -> int:
        """Acknowledge everything below ``committed`` on every node (cumulative, idempotent)."""
        total = 0
        for sub in self.subscriptions:
            if sub.base is not None:
                total += sub.acknowledge(committed[sub.node.name])
        if total:
            log.info("clustermq: acknowledged %d messages up to %s", total, dict(committed))
        return total

    def latest(
        self,
        start: NodeOffsets,
        max_messages: int | None,
        max_bytes: int | None,
    ) -> NodeOffsets:
        """The end offset of the next batch from ``start``, within the limits."""
        follow_priority(self.subscriptions)  # pauses or resumes nodes outside priorityNodes
        drain = self._drain
        cap = drain.cap() if drain is not None else None
        available = [sub.available(start[sub.node.name], cap) for sub in self.subscriptions]
        counts = allocate(available, max_messages, max_bytes)
        end = make_offsets(
            {sub.node.name: start[sub.node.name] + n for sub, n in zip(self.subscriptions, counts)},
            self.node_names,
        )
        for sub in self.subscriptions:
            sub.reserve(end[sub.node.name])
        if drain is not None:
            drain.planned(end != start)
        elif self._stalls is not None:
            self._stalls.planned(end != start)
        return end

    def watch_stalls(self, probe: DepthProbe) -> None:
        """Check, while the query finds nothing to read, whether the nodes hold messages they do
        not deliver (read/stalls.py). Not with a selector or on a topic: the depth then counts
        messages that are not this query's to read."""
        if self.options.selector or self.options.connection.topic is not None:
            return
        self._stalls = StallWatch(probe, lambda: self.subscriptions)

    def take(self, start: NodeOffsets, end: NodeOffsets) -> list[tuple[int, list[BufferedMessage]]]:
        """Every node's messages in ``[start, end)``, waiting for redelivery on a replay."""
        replay_deadline = time.monotonic() + self.options.replay_timeout_s
        out = []
        keyed: list[tuple[str | None, BufferedMessage]] = []
        for sub in self.subscriptions:
            name = sub.node.name
            if end[name] <= start[name]:
                continue
            wait = max(0.0, replay_deadline - time.monotonic())
            messages = sub.take(start[name], end[name], wait)
            keyed += ((sub.message_key(m.headers), m) for m in messages)
            out.append((sub.index, messages))
        flag_repeats(keyed)
        return out

    # ------------------------------------------------------------------ AvailableNow
    def prepare_available_now(
        self,
        backlog: int,
        probe: DepthProbe | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Read ``backlog`` messages (read/available_now.py). With a depth ``probe``: recount
        once that many have been read, and end early on a queue found empty. ``clock`` must be
        the one subscriptions stamp arrivals with; tests pass one that runs ahead."""
        self._drain = AvailableNow(backlog, probe, self.options.available_now_idle_timeout_s,
                                   self._arrivals, lambda: self.subscriptions, clock=clock, sleep=sleep)
        log.info("clustermq: Trigger.AvailableNow will read the %d messages queued at start",
                 backlog)

    @property
    def available_now_target(self) -> int | None:
        """The arrivals AvailableNow reads: the backlog, grown by redeliveries and the recount,
        cut to what arrived when it ended; ``None`` without AvailableNow."""
        return self._drain.cap() if self._drain is not None else None

    def _returned(self, count: int) -> None:
        drain = self._drain
        if drain is not None:
            drain.add_returned(count)

    def available_now_pending(self, start: NodeOffsets) -> bool:
        """True while AvailableNow should wait for more of its backlog to arrive."""
        return self._drain is not None and self._drain.pending()

    @property
    def first_delivery_wait_s(self) -> float:
        """How long the nodes read may take to start delivering what they hold: the longest of
        their dialects' (the base dialect's for a node not connected yet)."""
        return max((s.dialect.first_delivery_wait_s for s in self.subscriptions if s.dialect is not None),
                   default=BrokerDialect.first_delivery_wait_s)

    def depth_untold(self) -> bool:
        """Whether no node read can tell the depth of what is left to read (a topic subscription
        on Classic over STOMP): the lag report then asks none of them, instead of logging in on
        every node each round for an answer that is always unknown."""
        topic = self.options.connection.topic
        return topic is not None and bool(self.subscriptions) and all(
            s.dialect is not None and not s.dialect.tells_subscription_depth(topic)
            for s in self.subscriptions)

    def arrivals_so_far(self) -> int:
        return self._arrivals.value

    def wait_for_arrival(self, timeout: float) -> None:
        self._arrivals.wait_for_change(self._arrivals.value, timeout)

    def status(self) -> list[NodeStatus]:
        return [s.status() for s in self.subscriptions]
