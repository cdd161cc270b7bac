"""Trigger.AvailableNow: read the backlog queued when the query started, then end.

Counted in arrivals. Every delivery to the reader process gets the next arrival number, whichever
node it came from, and the target is a number of arrivals, not a count per node: a network of
brokers moves messages between nodes, so a per-node target could wait forever for a message
consumed on another node. A delivery that will come again (given back by a lost connection, or
a frame of a dropped connection) raises the target by one, and so does a second delivery of a
message this process already received, or the drain would end with a message still queued: a
Classic network of brokers can deliver a message twice after a killed consumer
(docs/broker-behaviour.md, "Copies made by a failed bridge"; docs/design.md, "Trigger.AvailableNow").

The drain's clock and its depth probe are passed in, so the state machine runs on any clock;
the clock must be the one the subscriptions stamp ``last_arrival`` with (``time.monotonic``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from clustermq.broker.nodes import Node
from clustermq.read.messages import NodeStatus

log = logging.getLogger("clustermq.consumer")

#: measures the queue's depth per node (``None`` where a node did not answer); broker/depth.py
DepthProbe = Callable[[], Mapping[str, "int | None"]]
#: the recount before AvailableNow ends: probe spacing, probes that must agree, longest wait
RECOUNT_INTERVAL_S = 0.25
RECOUNT_AGREEING = 3
RECOUNT_MAX_S = 5.0
#: while AvailableNow waits in vain, how long the quiet lasts before it first asks whether the
#: queue still holds anything, and how often it asks again
EMPTY_CHECK_AFTER_S = 1.0
EMPTY_CHECK_INTERVAL_S = 2.0


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


class DrainedNode(Protocol):
    """What the drain reads of a node's subscription (read/subscription.py)."""

    node: Node
    #: when the node last delivered (or the subscription was made), on the drain's clock
    last_arrival: float

    @property
    def connected(self) -> bool: ...

    def resubscribe(self, reason: str) -> bool: ...

    def status(self) -> NodeStatus: ...


class AvailableNow:
    """One AvailableNow run: how many arrivals it may read (``target``) and when it ends.

    ``target`` starts as the backlog measured at start; ``pending`` says whether the stream
    should wait for more of it. The run ends when the target is read (after one recount), when
    two depth probes in one quiet period find the queue empty, or after
    ``availableNowIdleTimeout`` without a delivery.
    """

    def __init__(
        self,
        backlog: int,
        probe: DepthProbe | None,
        idle_timeout_s: float,
        arrivals: ArrivalCounter,
        nodes: Callable[[], Sequence[DrainedNode]],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.target = backlog
        self.final = False
        self._recounted = False
        self._lock = threading.Lock()
        self._probe = probe
        self._idle_timeout_s = idle_timeout_s
        self._arrivals = arrivals
        self._nodes = nodes
        self._clock = clock
        self._sleep = sleep
        # since when the stream has found nothing to plan (None while batches are planned)
        self._quiet_since: float | None = None
        # the last arrival after which the drain resubscribed (once per quiet period)
        self._resubscribed_after: float | None = None
        # when the drain may next ask whether the queue is empty, and the quiet period (its
        # last arrival) in which it found the queue empty so far
        self._next_empty_check = 0.0
        self._empty_streak: tuple[float, int] = (0.0, 0)

    def cap(self) -> int:
        """Arrivals numbered below this may be planned."""
        with self._lock:
            return self.target

    def add_returned(self, count: int) -> None:
        """Deliveries that do not count: given back (they arrive again) or copies."""
        with self._lock:
            if not self.final:
                self.target += count

    def planned(self, anything: bool) -> None:
        """The stream planned a batch (``anything``) or found nothing to plan.

        Quiet time counts from the first call that found nothing, not from the last arrival: a
        batch that takes longer to process than ``availableNowIdleTimeout`` is not "nothing
        arrived" (docs/design.md, "Trigger.AvailableNow").
        """
        if anything:
            self._quiet_since = None
        elif self._quiet_since is None:
            self._quiet_since = self._clock()

    def stall_after_s(self) -> float:
        """Quiet time after which the drain suspects a dispatch stall: a third of
        ``availableNowIdleTimeout`` (at most 3 s), so the fresh subscriptions still have the
        rest of the idle timeout to deliver."""
        return min(3.0, self._idle_timeout_s / 3)

    def pending(self) -> bool:
        """True while the stream should wait for more of the backlog to arrive."""
        with self._lock:
            if self.final:
                return False
        received = self._arrivals.value
        if received >= self.target:
            return self._recount()
        nodes = self._nodes()
        last_arrival = max([n.last_arrival for n in nodes] + [self._quiet_since or 0.0])
        idle = self._clock() - last_arrival
        if idle > self._idle_timeout_s:
            self._end(received, f"nothing arrived for {idle:.1f} s")
            return False
        if (idle > min(EMPTY_CHECK_AFTER_S, self.stall_after_s())
                and self._queue_found_empty(last_arrival)):
            self._end(received, "the queue was found empty twice")
            return False
        if (idle > self.stall_after_s() and self._resubscribed_after != last_arrival
                and not self._found_empty_in(last_arrival)):
            # The backlog is not read yet, nothing arrives and the queue still holds messages:
            # kick nodes that may be stalled.
            self._resubscribed_after = last_arrival
            kicked = [n.node.name for n in nodes if n.resubscribe(
                f"no delivery for {idle:.1f} s while AvailableNow has {self.target - received} "
                "messages to read; resubscribing")]
            if kicked:
                log.warning("clustermq: AvailableNow idle for %.1f s with %d of %d messages read; "
                            "resubscribed on %s (a consumer that connects afresh gets "
                            "messages a stalled node holds back)", idle, received, self.target,
                            ", ".join(kicked))
        return True

    def _end(self, received: int, why: str) -> None:
        with self._lock:
            log.info("clustermq: AvailableNow received %d of the %d messages measured at start "
                     "and ends: %s (other consumers took the rest)", received, self.target, why)
            self.target = received
            self.final = True

    def _found_empty_in(self, quiet_period: float) -> bool:
        """Whether the last probe of this quiet period found the queue empty: then no node
        holds anything back, and resubscribing would only cost every node a reconnection (a
        competing consumer took the rest; the second probe decides)."""
        period, streak = self._empty_streak
        return period == quiet_period and streak > 0

    def _queue_found_empty(self, quiet_period: float) -> bool:
        """True once, waiting in vain for its backlog, the drain found the queue empty in two
        probes ``EMPTY_CHECK_INTERVAL_S`` apart within one quiet period.

        Why: competing consumers may have taken the rest, and then waiting the whole
        ``availableNowIdleTimeout`` gains nothing; but a Classic bridge that stalls holds its
        messages (counted on their node) until it is rebuilt, and those are worth the wait
        (docs/broker-behaviour.md, "Dispatch stalls with many groups"). So the idle timeout can
        be long while an emptied queue still ends the run within seconds. Twice, because a
        message Artemis moves between nodes is counted on neither for a moment. A node that
        does not answer counts as empty only while this query is not connected to it either (it
        cannot deliver then).
        """
        probe = self._probe
        if probe is None or self._clock() < self._next_empty_check:
            return False
        measured = self._settled_depth(probe)
        self._next_empty_check = self._clock() + EMPTY_CHECK_INTERVAL_S
        empty = (measured is not None and not self._reachable_but_silent(measured[1])
                 and measured[0] - self._buffered() <= 0)
        period, streak = self._empty_streak
        if not empty:
            self._empty_streak = (quiet_period, 0)
            return False
        streak = streak + 1 if period == quiet_period else 1
        self._empty_streak = (quiet_period, streak)
        return streak >= 2

    def _recount(self) -> bool:
        """Once the backlog measured at start is read, measure again and read what is left.

        Why: a message that Artemis redistributes between nodes while the start probe runs is in
        the cluster bridge's store-and-forward queue, counted on neither node, so the target can
        be short and the drain would end with it still queued (a restart subscribes to the nodes
        milliseconds apart, and `redistribution-delay` 0 moves messages in that window). Done
        once, so a producer that never stops cannot keep a run going. The depth also counts
        ACKs the broker has not processed yet; waiting for agreeing probes lets them land.
        """
        with self._lock:
            probe = self._probe
            if probe is None or self._recounted or self.final:
                return False
            self._recounted = True
        measured = self._settled_depth(probe)
        if measured is None or measured[0] <= 0:
            return False
        depth = measured[0]
        with self._lock:
            # The depth includes what this query holds beyond the old target (delivered, not
            # planned); those arrivals are already counted in ``received``.
            held = self._buffered()
            received = self._arrivals.value
            self.target = max(self.target, received + depth - held)
        log.info("clustermq: AvailableNow read the backlog measured at start; a recount found %d "
                 "messages still queued (%d of them delivered here), reading them too", depth, held)
        return True

    def _buffered(self) -> int:
        """Messages delivered to this query and not acknowledged: the broker counts them too."""
        return sum(n.status().buffered for n in self._nodes())

    def _reachable_but_silent(self, unanswered: set[str]) -> bool:
        """A node the depth probe got no answer from while this query is connected to it: it
        may hold messages for the query."""
        return any(n.connected for n in self._nodes() if n.node.name in unanswered)

    def _settled_depth(self, probe: DepthProbe) -> tuple[int, set[str]] | None:
        """The queue's total depth over the nodes that answered, once ``RECOUNT_AGREEING`` probes
        in a row agree (at most ``RECOUNT_MAX_S``, then the smallest of the last ones; at once
        when a probe finds nothing), and the nodes that did not answer the last probe; ``None``
        when the probe itself failed."""
        deadline = self._clock() + RECOUNT_MAX_S
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
            if self._clock() > deadline:
                return min(last), unknown
            self._sleep(RECOUNT_INTERVAL_S)
