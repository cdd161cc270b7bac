"""The baseline: plain stomp.py consumers, one per node, with no Spark in the way.

The read benchmark quotes the connector as a ratio of this rate, so it must be an honest best
case for the same work: client acknowledgement (cumulative, every ``ack_every`` messages, like
the connector's one ACK per node per batch), the same prefetch, the same persistent backlog.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import stomp

from ..connection import close_connection, open_connection
from ..dialect import resolve_dialect
from ..nodes import Node
from ..options import ConnectionOptions


@dataclass
class DrainResult:
    seconds: float
    per_node: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.per_node.values())


class _Counter(stomp.ConnectionListener):
    """Counts deliveries and keeps the ack id of every ``ack_every``-th for the main thread."""

    def __init__(self, ack_every: int) -> None:
        self.ack_every = ack_every
        self.count = 0
        self.last_ack: str | None = None
        self.pending: list[str] = []
        self.cond = threading.Condition()

    def on_message(self, frame: stomp.utils.Frame) -> None:
        with self.cond:
            self.count += 1
            self.last_ack = frame.headers.get("ack")
            if self.count % self.ack_every == 0 and self.last_ack:
                self.pending.append(self.last_ack)
            self.cond.notify_all()


def raw_drain(
    options: ConnectionOptions,
    expected: int,
    prefetch: int = 2000,
    ack_every: int = 1000,
    idle_timeout_s: float = 30.0,
) -> DrainResult:
    """Consume until ``expected`` messages arrived over all nodes; ACK every ``ack_every``.

    ACKs are sent from the node's own thread, never from stomp.py's receiver thread (which
    deadlocks on a full socket buffer, measured in the reader).
    """
    nodes: list[Node] = list(options.nodes)
    counters = [_Counter(ack_every) for _ in nodes]
    done = threading.Event()
    errors: list[BaseException] = []
    started = time.monotonic()

    def total() -> int:
        return sum(c.count for c in counters)

    def run(index: int, node: Node) -> None:
        counter = counters[index]
        try:
            conn, connected = open_connection(node, options, counter, "bench-raw")
            try:
                dialect = resolve_dialect(options.flavor, connected.get("server"))
                conn.subscribe(
                    dialect.destination(options.queue), id=f"raw-{index}", ack="client",
                    headers=dialect.subscribe_headers(prefetch, 1 << 26),
                )
                last_progress = time.monotonic()
                seen = 0
                while not done.is_set():
                    with counter.cond:
                        counter.cond.wait(0.2)
                        pending, counter.pending = counter.pending, []
                        now_count = counter.count
                    for ack in pending[-1:]:  # cumulative: the newest covers the rest
                        conn.ack(ack)
                    if now_count != seen:
                        seen, last_progress = now_count, time.monotonic()
                    if total() >= expected:
                        done.set()
                    elif time.monotonic() - last_progress > idle_timeout_s and total() > 0:
                        break
                with counter.cond:
                    tail = counter.last_ack
                if tail:
                    conn.ack(tail)
            finally:
                close_connection(conn)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)
            done.set()

    threads = [threading.Thread(target=run, args=(i, n), daemon=True, name=f"raw-{i}")
               for i, n in enumerate(nodes)]
    for t in threads:
        t.start()
    while not done.wait(0.5):
        if not any(t.is_alive() for t in threads):
            break  # every node went idle short of ``expected``: report what arrived
    seconds = time.monotonic() - started
    for t in threads:
        t.join(timeout=30)
    if errors:
        raise errors[0]
    return DrainResult(seconds, {n.name: c.count for n, c in zip(nodes, counters)})
