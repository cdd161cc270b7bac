"""The baseline: plain stomp.py consumers, one per node, with no Spark in the way.

The read benchmark quotes the connector as a ratio of this rate, so it must be an honest best
case for the same work: client acknowledgement (cumulative, every ``ack_every`` messages and
whenever deliveries pause, like the connector's one ACK per node per batch), the same prefetch,
the same persistent backlog. Only the connection is the connector's (``open_node``: same
login, TLS and heart-beat settings); everything after CONNECTED is plain stomp.py.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from clustermq.broker.connection_options import ConnectionOptions
from clustermq.broker.dialect import BrokerDialect
from clustermq.broker.listener import StompListener
from clustermq.broker.nodes import Node
from clustermq.broker.session import open_node


@dataclass(frozen=True)
class Taken:
    """One message a raw consumer took, for tests that must say who read what."""

    node: str
    key: str | None  # the value of the header ``raw_drain`` was asked to record
    message_id: str | None  # as the reader's ``message_id`` column has it (the dialect's)
    redelivered: bool


@dataclass
class DrainResult:
    """``seconds`` runs to the last arrival, so a stall's idle wait is not counted as work."""

    seconds: float
    per_node: dict[str, int]
    stalled: bool = False
    #: every message taken, when ``raw_drain`` was given a ``key_header``
    taken: list[Taken] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.per_node.values())


#: a pause in deliveries after which the raw consumer acknowledges what it holds
_QUIET_S = 0.1


class _Counter(StompListener):
    """Counts deliveries and keeps the ack id of every ``ack_every``-th for the main thread."""

    def __init__(self, ack_every: int, key_header: str | None = None) -> None:
        super().__init__()
        self.ack_every = ack_every
        self.key_header = key_header
        self.taken: list[Taken] = []
        self.node = ""
        self.dialect: BrokerDialect | None = None
        self.count = 0
        self.last_ack: str | None = None
        self.pending: list[str] = []
        self.unacked: list[str] = []
        self.last_arrival = time.monotonic()
        self.cond = threading.Condition()
        # Set when the final ACK is chosen: a message that arrives after it is neither
        # acknowledged nor counted (the broker gives it to another consumer after the
        # DISCONNECT), so ``count`` is what this consumer took, never one it handed back.
        # Counting such a straggler made a competing-consumer test see 3,001 of 3,000.
        self.closed = False

    def on_message(self, frame: Any) -> None:
        with self.cond:
            if self.closed:
                return
            self.count += 1
            if self.key_header is not None:
                headers = frame.headers
                self.taken.append(Taken(
                    self.node, headers.get(self.key_header),
                    self.dialect.message_id(headers, self.node) if self.dialect else None,
                    headers.get("redelivered") == "true"))
            self.last_ack = frame.headers.get("ack")
            if self.last_ack:
                self.unacked.append(self.last_ack)
            self.last_arrival = time.monotonic()
            if self.count % self.ack_every == 0:
                self.pending.extend(self.unacked)
                self.unacked = []
            self.cond.notify_all()

    def flush_if_quiet(self, quiet_s: float) -> None:
        """Hand over the unacknowledged rest when deliveries paused for ``quiet_s``.

        Measured on the Classic network with 1,000 groups: consumers that ACK only every
        1,000th message stall for good (3,344 of 20,000 read, then nothing), because the
        brokers hold back grouped messages until earlier ones are acknowledged; with an ACK
        on every pause they drain all 20,000. The reader does the same implicitly: a batch
        takes what has arrived, and its commit acknowledges it.
        """
        with self.cond:
            if self.unacked and time.monotonic() - self.last_arrival >= quiet_s:
                self.pending.extend(self.unacked)
                self.unacked = []


def raw_drain(
    options: ConnectionOptions,
    expected: int,
    prefetch: int = 2000,
    ack_every: int = 1000,
    idle_timeout_s: float = 30.0,
    ack_mode: str = "client",
    key_header: str | None = None,
) -> DrainResult:
    """Consume until ``expected`` messages arrived over all nodes; ACK every ``ack_every``.

    ACKs are sent from the node's own thread, never from stomp.py's receiver thread (which
    deadlocks on a full socket buffer, measured in the reader). ``key_header`` names a header
    to record per message taken, so a test can say which messages this consumer took.
    """
    nodes: list[Node] = list(options.nodes)
    counters = [_Counter(ack_every, key_header) for _ in nodes]
    done = threading.Event()
    errors: list[BaseException] = []
    started = time.monotonic()

    def total() -> int:
        return sum(c.count for c in counters)

    def run(index: int, node: Node) -> None:
        counter = counters[index]
        counter.node = node.name
        try:
            with open_node(node, options, counter, "bench-raw") as session:
                conn, dialect = session.conn, session.dialect
                counter.dialect = dialect  # set before SUBSCRIBE, the first delivery needs it
                conn.subscribe(
                    dialect.destination(options.queue), id=f"raw-{index}", ack=ack_mode,
                    headers=dialect.subscribe_headers(prefetch, 1 << 26),
                )
                while not done.is_set():
                    counter.flush_if_quiet(_QUIET_S)
                    with counter.cond:
                        counter.cond.wait(0.2)
                        pending, counter.pending = counter.pending, []
                    if ack_mode == "client":
                        pending = pending[-1:]  # cumulative: the newest covers the rest
                    for ack in pending:
                        conn.ack(ack)
                    if total() >= expected:
                        done.set()
                with counter.cond:
                    counter.closed = True
                    tail = counter.pending + counter.unacked  # oldest first: tail[-1] is newest
                for ack in (tail[-1:] if ack_mode == "client" else tail):
                    conn.ack(ack)
        except BaseException as exc:
            errors.append(exc)
            done.set()

    threads = [threading.Thread(target=run, args=(i, n), daemon=True, name=f"raw-{i}")
               for i, n in enumerate(nodes)]
    for t in threads:
        t.start()
    # Every consumer stays subscribed until the *whole* backlog arrived: in a network of
    # brokers a node whose consumer left pushes its messages (and groups) over the bridges to
    # the others, which would turn the baseline into a measurement of forwarding.
    last_total, last_progress = 0, time.monotonic()
    stalled = False
    while not done.wait(0.5):
        now = total()
        if now >= expected:
            break
        if now != last_total:
            last_total, last_progress = now, time.monotonic()
        elif time.monotonic() - last_progress > idle_timeout_s or not any(t.is_alive() for t in threads):
            stalled = True  # nothing arrived anywhere for idle_timeout_s: report what did
            break
    done.set()
    seconds = (last_progress if stalled else time.monotonic()) - started
    for t in threads:
        t.join(timeout=30)
    if errors:
        raise errors[0]
    return DrainResult(seconds, {n.name: c.count for n, c in zip(nodes, counters)}, stalled,
                       [t for c in counters for t in c.taken])
