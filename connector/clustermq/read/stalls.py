"""A running query that finds nothing to read while its nodes still hold messages: resubscribe.

A Classic node pins each message group to a consumer, and a network bridge's consumer counts.
When the group's owner is the bridge towards a node the message came from, the loop check keeps
the bridge from carrying it, and the node's own reader consumers may not have it either (the
group is the bridge's): the message stays queued for as long as that bridge consumer lives, which
is as long as this query's subscription on the far side (docs/broker-behaviour.md, "A group
pinned to a bridge that may not carry its message"). Closing that subscription removes the
bridge consumer and releases its groups; the holding node's own reader consumers (priority 0,
before any bridge) then get them. A node can also stop dispatching to a consumer with room,
which a fresh subscription ends ("Dispatch stalls with many groups").

So after ``STALL_AFTER_S`` in which a streaming query planned nothing, the watch measures the
queue's depth once. If a node it reads holds more than the query holds from it, the watch
re-opens the subscriptions of the *other* nodes first (the bridge consumers they stand for may
own the groups), and, when the next check ``STALL_RECHECK_S`` later still finds messages held,
those of the holding nodes themselves; then the other nodes again, and so on while the quiet
lasts. Only a subscription with nothing delivered and unacknowledged is re-opened
(``NodeSubscription.resubscribe``), so it cannot make a duplicate. A competing consumer's
prefetched messages count as held too: then a quiet query re-opens idle subscriptions once
per recheck, which costs a reconnect and nothing else. Trigger.AvailableNow has a watch of its
own (read/available_now.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from clustermq.read.available_now import DepthProbe, DrainedNode

log = logging.getLogger("clustermq.consumer")

#: quiet time (nothing planned) before the first check; a stalled Classic bridge is rebuilt
#: within about 10 s in the local cluster, which a check must not pre-empt
STALL_AFTER_S = 15.0
#: time between two checks while the quiet lasts
STALL_RECHECK_S = 30.0


class StallWatch:
    """Checks a quiet streaming query for messages its nodes hold but do not deliver."""

    def __init__(
        self,
        probe: DepthProbe,
        nodes: Callable[[], Sequence[DrainedNode]],
        *,
        clock: Callable[[], float] = time.monotonic,
        spawn: Callable[[Callable[[], None]], None] | None = None,
        after_s: float = STALL_AFTER_S,
        recheck_s: float = STALL_RECHECK_S,
    ) -> None:
        self._probe = probe
        self._nodes = nodes
        self._clock = clock
        self._spawn = spawn or _in_thread
        self._after_s = after_s
        self._recheck_s = recheck_s
        self._lock = threading.Lock()
        self._next_check: float | None = None  # None while batches are planned
        self._checking = False
        self._checks = 0  # in this quiet period: odd re-open the other nodes, even the holders

    def planned(self, anything: bool) -> None:
        """The stream planned a batch (``anything``) or found nothing to plan; a check is
        started, off the caller's thread, once the quiet has lasted long enough."""
        now = self._clock()
        with self._lock:
            if anything:
                self._next_check, self._checks = None, 0
                return
            if self._next_check is None:
                self._next_check = now + self._after_s
                return
            if self._checking or now < self._next_check:
                return
            self._checking = True
            self._next_check = now + self._recheck_s
            self._checks += 1
            holders_too = self._checks % 2 == 0
        self._spawn(lambda: self._check_and_release(holders_too))

    def _check_and_release(self, holders_too: bool) -> None:
        try:
            self.check(holders_too)
        except Exception as exc:  # a failed probe must not end the query
            log.warning("clustermq: could not check the queue for held messages (%s)", exc)
        finally:
            with self._lock:
                self._checking = False

    def check(self, holders_too: bool = False) -> list[str]:
        """Measure the queue; if a node holds messages this query does not have, re-open the
        settled subscriptions of the other nodes (and, with ``holders_too``, of the holding
        ones); the names re-opened."""
        depths = self._probe()
        nodes = list(self._nodes())
        held = {}
        for sub in nodes:
            status = sub.status()
            depth = depths.get(sub.node.name)
            if depth is not None and sub.connected and not status.paused and depth > status.buffered:
                held[sub.node.name] = depth - status.buffered
        if not held:
            return []
        targets = [sub for sub in nodes if holders_too or sub.node.name not in held]
        reason = (f"nothing to read for {self._after_s:.0f} s or more while "
                  f"{', '.join(f'{n} holds {c}' for n, c in held.items())}; resubscribing")
        reopened = [sub.node.name for sub in targets if sub.resubscribe(reason)]
        log.warning("clustermq: nothing to read while the brokers hold messages (%s); re-opened "
                    "the subscriptions on %s (a group a node pinned to a bridge consumer that may "
                    "not carry its message is released when that consumer goes)",
                    ", ".join(f"{n}: {c}" for n, c in held.items()),
                    ", ".join(reopened) or "no node (every one still held unacknowledged messages)")
        return reopened


def _in_thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="clustermq-stall-check", daemon=True).start()
