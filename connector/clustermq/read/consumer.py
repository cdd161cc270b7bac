"""The driver-side consumer of the whole cluster: one subscription per node, offsets, acks.

Spark's Kafka source splits offset bookkeeping (``KafkaOffsetReader``) from the micro-batch
stream; this is the clustermq counterpart of the offset reader. It is created lazily in the
long-lived reader process and never pickled.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from clustermq.broker.discovery import with_discovered
from clustermq.broker.nodes import Node
from clustermq.broker.reachability import no_node_reachable
from clustermq.errors import NodeUnavailable, NoNodeReachable
from clustermq.options import ReadOptions
from clustermq.read.arrivals import ArrivalCounter, AvailableNowTarget
from clustermq.read.copies import RecentIds
from clustermq.read.membership import MembershipWatch, first_connect
from clustermq.read.messages import BufferedMessage, NodeStatus
from clustermq.read.offsets import NodeOffsets, allocate, make_offsets
from clustermq.read.priority import connect_order, follow_priority, subscription_class
from clustermq.read.subscription import NodeSubscription

log = logging.getLogger("clustermq.consumer")

#: measures the queue's depth per node (``None`` where a node did not answer); depth.py
DepthProbe = Callable[[], Mapping[str, "int | None"]]
#: the recount before AvailableNow ends: probe spacing, probes that must agree, longest wait
RECOUNT_INTERVAL_S = 0.25
RECOUNT_AGREEING = 3
RECOUNT_MAX_S = 5.0
#: while AvailableNow waits in vain, how often it asks whether the queue still holds anything
EMPTY_CHECK_INTERVAL_S = 2.0


class ClusterConsumer:
    """Competing consumer on every node; numbering, admission control and acknowledgement."""

    def __init__(self, options: ReadOptions) -> None:
        self._membership: MembershipWatch | None = None
        if options.discovery == "cluster":
            seeds, conn = options.connection.nodes, with_discovered(options.connection)
            partitions = len(conn.nodes) if options.partitions_per_node else options.num_partitions
            options = dataclasses.replace(options, connection=conn, num_partitions=partitions)
            self._membership = MembershipWatch(options.connection, lambda: self.node_names,
                                               self._subscription, seeds, lambda: self.subscriptions)
        self.options = options
        self._arrivals = ArrivalCounter()
        self._target: AvailableNowTarget | None = None
        self._target_lock = threading.Lock()
        self._probe: DepthProbe | None = None
        self._recent = RecentIds()
        self.subscriptions = [self._subscription(n, i) for i, n in enumerate(options.connection.nodes)]
        self._started = False
        self._all_down_since: float | None = None
        # the last arrival after which AvailableNow resubscribed (once per quiet period)
        self._resubscribed_after: float | None = None
        # since when ``latest`` has found nothing to plan (None while batches are planned)
        self._quiet_since: float | None = None
        # when AvailableNow, waiting for its backlog, may next ask whether the queue is empty,
        # and the quiet period (its last arrival) in which it found the queue empty so far
        self._next_empty_check = 0.0
        self._empty_streak: tuple[float, int] = (0.0, 0)

    def _stall_after_s(self) -> float:
        """Quiet time after which AvailableNow suspects a dispatch stall: a third of
        ``availableNowIdleTimeout`` (at most 3 s), so the fresh subscriptions still have the
        rest of the idle timeout to deliver."""
        return min(3.0, self.options.available_now_idle_timeout_s / 3)

    @property
    def node_names(self) -> list[str]:
        return [s.node.name for s in self.subscriptions]

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Connect to every node at once; fail only if none answers."""
        if self._started:
            return
        errors: list[NodeUnavailable] = []
        for wave in connect_order(self.subscriptions):  # priorityNodes first, see priority.py
            with ThreadPoolExecutor(max_workers=len(wave)) as pool:
                errors += [r for r in pool.map(first_connect, wave) if r is not None]
        if not any(s.connected for s in self.subscriptions):
            for sub in self.subscriptions:
                sub.stop()
            raise no_node_reachable(f"to start reading queue '{self.options.connection.queue}'", errors)
        for error in errors:
            log.warning("clustermq: %s; reconnecting in the background", error)
        for sub in self.subscriptions:
            sub.start()
        self._started = True
        if self._membership is not None:
            self._membership.start()

    def _subscription(self, node: Node, index: int) -> NodeSubscription:
        return subscription_class(self.options, node)(node, index, self.options, self._arrivals,
                                                      self._returned, self._recent)

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
        cap = self._arrival_cap()
        available = [sub.available(start[sub.node.name], cap) for sub in self.subscriptions]
        counts = allocate(available, max_messages, max_bytes)
        end = make_offsets(
            {sub.node.name: start[sub.node.name] + n for sub, n in zip(self.subscriptions, counts)},
            self.node_names,
        )
        for sub in self.subscriptions:
            sub.reserve(end[sub.node.name])
        # Quiet time counts from here when this call found nothing: a batch that takes longer
        # to process than availableNowIdleTimeout is not "nothing arrived" (measured in CI: a
        # 15 s Delta batch made the next call end AvailableNow at once with 843 messages left).
        if end == start:
            if self._quiet_since is None:
                self._quiet_since = time.monotonic()
        else:
            self._quiet_since = None
        return end

    def take(self, start: NodeOffsets, end: NodeOffsets) -> list[tuple[int, list[BufferedMessage]]]:
        """Every node's messages in ``[start, end)``, waiting for redelivery on a replay."""
        replay_deadline = time.monotonic() + self.options.replay_timeout_s
        out = []
        for sub in self.subscriptions:
            name = sub.node.name
            if end[name] <= start[name]:
                continue
            wait = max(0.0, replay_deadline - time.monotonic())
            out.append((sub.index, sub.take(start[name], end[name], wait)))
        return out

    # ------------------------------------------------------------------ AvailableNow
    def prepare_available_now(self, backlog: int, probe: DepthProbe | None = None) -> None:
        """Read ``backlog`` messages. With a depth ``probe``: recount once that many have been
        read (``_recount``), and end early on a queue found empty (``_queue_found_empty``)."""
        with self._target_lock:
            self._target = AvailableNowTarget(backlog)
            self._probe = probe
        self._recent.activate()
        log.info("clustermq: Trigger.AvailableNow will read the %d messages queued at start",
                 backlog)

    def _returned(self, count: int) -> None:
        with self._target_lock:
            if self._target is not None:
                self._target.add_returned(count)

    def _arrival_cap(self) -> int | None:
        with self._target_lock:
            return None if self._target is None else self._target.limit

    def available_now_pending(self, start: NodeOffsets) -> bool:
        """True while AvailableNow should wait for more of its backlog to arrive."""
        with self._target_lock:
            target = self._target
            if target is None or target.final:
                return False
        received = self.arrivals_so_far()
        if received >= target.limit:
            return self._recount(target)
        last_arrival = max([s.last_arrival for s in self.subscriptions]
                           + [self._quiet_since or 0.0])
        idle = time.monotonic() - last_arrival
        if idle > self._stall_after_s() and self._resubscribed_after != last_arrival:
            # The backlog is not read yet and nothing arrives: kick nodes that may be stalled.
            self._resubscribed_after = last_arrival
            kicked = [s.node.name for s in self.subscriptions if s.resubscribe(
                f"no delivery for {idle:.1f} s while AvailableNow has {target.limit - received} "
                "messages to read; resubscribing")]
            if kicked:
                log.warning("clustermq: AvailableNow idle for %.1f s with %d of %d messages read; "
                            "resubscribed on %s (a consumer that connects afresh gets "
                            "messages a stalled node holds back)", idle, received, target.limit,
                            ", ".join(kicked))
        if idle > self.options.available_now_idle_timeout_s:
            self._end_available_now(target, received, f"nothing arrived for {idle:.1f} s")
            return False
        if idle > self._stall_after_s() and self._queue_found_empty(last_arrival):
            self._end_available_now(target, received, "the queue was found empty twice")
            return False
        return True

    def _end_available_now(self, target: AvailableNowTarget, received: int, why: str) -> None:
        with self._target_lock:
            log.info("clustermq: AvailableNow received %d of the %d messages measured at start "
                     "and ends: %s (other consumers took the rest)", received, target.limit, why)
            target.limit = received
            target.final = True

    def _queue_found_empty(self, quiet_period: float) -> bool:
        """True once, waiting in vain for its backlog, AvailableNow found the queue empty in two
        probes ``EMPTY_CHECK_INTERVAL_S`` apart within one quiet period.

        Why: competing consumers may have taken the rest, and then waiting the whole
        ``availableNowIdleTimeout`` gains nothing; but a Classic bridge that stalls holds its
        messages (counted on their node) until it is rebuilt, and those are worth the wait
        (docs/broker-behaviour.md, "Dispatch stalls with many groups"). So the idle timeout can be long while an emptied
        queue still ends the run within seconds. Twice, because a message Artemis moves
        between nodes is counted on neither for a moment. A node that does not answer counts as
        empty only while this query is not connected to it either (it cannot deliver then).
        """
        probe = self._probe
        if probe is None or time.monotonic() < self._next_empty_check:
            return False
        measured = self._settled_depth(probe)
        self._next_empty_check = time.monotonic() + EMPTY_CHECK_INTERVAL_S
        empty = (measured is not None and not self._reachable_but_silent(measured[1])
                 and measured[0] - self._buffered() <= 0)
        period, streak = self._empty_streak
        if not empty:
            self._empty_streak = (quiet_period, 0)
            return False
        streak = streak + 1 if period == quiet_period else 1
        self._empty_streak = (quiet_period, streak)
        return streak >= 2

    def _recount(self, target: AvailableNowTarget) -> bool:
        """Once the backlog measured at start is read, measure again and read what is left.

        Why: a message that Artemis redistributes between nodes while the start probe runs is in
        the cluster bridge's store-and-forward queue, counted on neither node, so the target can
        be short and the drain would end with it still queued (a restart subscribes to the nodes
        milliseconds apart, and `redistribution-delay` 0 moves messages in that window). Done
        once, so a producer that never stops cannot keep a run going. The depth also counts
        ACKs the broker has not processed yet; waiting for agreeing probes lets them land.
        """
        with self._target_lock:
            probe = self._probe
            if probe is None or target.recounted or target.final:
                return False
            target.recounted = True
        measured = self._settled_depth(probe)
        if measured is None or measured[0] <= 0:
            return False
        depth = measured[0]
        with self._target_lock:
            # The depth includes what this query holds beyond the old target (delivered, not
            # planned); those arrivals are already counted in ``received``.
            held = self._buffered()
            received = self.arrivals_so_far()
            target.limit = max(target.limit, received + depth - held)
        log.info("clustermq: AvailableNow read the backlog measured at start; a recount found %d "
                 "messages still queued (%d of them delivered here), reading them too", depth, held)
        return True

    def _buffered(self) -> int:
        """Messages delivered to this query and not acknowledged: the broker counts them too."""
        return sum(st.buffered for st in self.status())

    def _reachable_but_silent(self, unanswered: set[str]) -> bool:
        """A node the depth probe got no answer from while this query is connected to it: it
        may hold messages for the query."""
        return any(s.connected for s in self.subscriptions if s.node.name in unanswered)

    @staticmethod
    def _settled_depth(probe: DepthProbe) -> tuple[int, set[str]] | None:
        """The queue's total depth over the nodes that answered, once ``RECOUNT_AGREEING`` probes
        in a row agree (at most ``RECOUNT_MAX_S``, then the smallest of the last ones; at once
        when a probe finds nothing), and the nodes that did not answer the last probe; ``None``
        when the probe itself failed."""
        deadline = time.monotonic() + RECOUNT_MAX_S
        seen: list[int] = []
        while True:
            try:
                depths = probe()
            except Exception as exc:
                log.warning("clustermq: AvailableNow could not measure the queue (%s)", exc)
                return None
            unknown = {name for name, d in depths.items() if d is None}
            seen.append(sum(d for d in depths.values() if d))
            last = seen[-RECOUNT_AGREEING:]
            if seen[-1] <= 0 or (len(last) == RECOUNT_AGREEING and len(set(last)) == 1):
                return seen[-1], unknown
            if time.monotonic() > deadline:
                return min(last), unknown
            time.sleep(RECOUNT_INTERVAL_S)

    def arrivals_so_far(self) -> int:
        return self._arrivals.value

    def wait_for_arrival(self, timeout: float) -> None:
        self._arrivals.wait_for_change(self._arrivals.value, timeout)

    def status(self) -> list[NodeStatus]:
        return [s.status() for s in self.subscriptions]
