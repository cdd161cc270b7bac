"""Load generator: a plain stomp.py producer, one connection and thread per node.

It is deliberately the raw client (no Spark) so that tests and benchmarks have an independent
producer to compare the connector with. Each message carries ``loadgen_id`` (unique, 0..N-1)
and, when grouped, ``loadgen_group_seq`` (position inside its group), so a consumer can check
completeness and per-group order. Paced (``LoadSpec.rate``), it sends at a steady rate and stamps
each message with ``loadgen_sent_ms``, the epoch milliseconds of its send: what the bench's
latency step measures from. A group always goes to the node ``bucket_for_group`` picks,
the same rule as the clustermq writer.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import stomp

from clustermq.broker.connection_options import ConnectionOptions
from clustermq.broker.listener import StompListener, commit_with_receipt
from clustermq.broker.nodes import Node
from clustermq.broker.session import open_node
from clustermq.errors import LinkLost, NodeUnavailable
from clustermq.groups import bucket_for_group

#: how long a COMMIT may wait for its RECEIPT: only then are the messages on the queue
COMMIT_TIMEOUT_S = 60.0
#: A paced producer ahead of its schedule by more than this commits what it holds and sleeps;
#: less, and it sends on (a sleep per message would cost more than the message).
PACE_SLACK_S = 0.002


@dataclass(frozen=True)
class LoadSpec:
    count: int
    groups: int = 0
    size: int = 256
    persistent: bool = True
    transaction_size: int = 1000
    group_prefix: str = "g"
    first_id: int = 0
    #: messages per second over all nodes (each node's thread sends its share); None: as fast
    #: as the brokers take them. A paced producer commits whenever it is ahead of its schedule,
    #: so a message waits in an open transaction at most ``PACE_SLACK_S`` unless it falls behind.
    rate: float | None = None

    def __post_init__(self) -> None:
        if self.rate is not None and not self.rate > 0:
            raise ValueError(f"rate must be a positive number of messages per second, got {self.rate!r}")


def plan(spec: LoadSpec, nodes: int) -> list[list[tuple[int, str | None, int]]]:
    """For every node: the (id, group, position-in-group) of each message it gets, in order."""
    per_node: list[list[tuple[int, str | None, int]]] = [[] for _ in range(nodes)]
    group_pos: dict[str, int] = {}
    for i in range(spec.first_id, spec.first_id + spec.count):
        if spec.groups:
            group = f"{spec.group_prefix}{i % spec.groups}"
            pos = group_pos.get(group, 0)
            group_pos[group] = pos + 1
            per_node[bucket_for_group(group, nodes)].append((i, group, pos))
        else:
            per_node[i % nodes].append((i, None, 0))
    return per_node


def _body(i: int, size: int) -> bytes:
    head = f'{{"order":{i},"pad":"'.encode()
    tail = b'"}'
    pad = max(0, size - len(head) - len(tail))
    return head + b"x" * pad + tail


def produce(
    options: ConnectionOptions,
    spec: LoadSpec,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, int]:
    """Send ``spec.count`` messages over every node; return the count sent per node."""
    nodes = list(options.nodes)
    work = plan(spec, len(nodes))
    sent = [0] * len(nodes)
    done = [0] * len(nodes)
    errors: list[BaseException] = []

    def run(index: int, node: Node) -> None:
        try:
            sent[index] = _produce_node(options, node, work[index], spec, done, index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, n), daemon=True) for i, n in enumerate(nodes)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(timeout=1.0)
        if progress is not None:
            progress(sum(done), spec.count)
    if errors:
        raise errors[0]
    return {n.name: c for n, c in zip(nodes, sent)}


def _produce_node(
    options: ConnectionOptions,
    node: Node,
    items: list[tuple[int, str | None, int]],
    spec: LoadSpec,
    done: list[int],
    slot: int,
) -> int:
    listener = StompListener()
    with open_node(node, options, listener, "clustermq-loadgen") as session:
        conn, dialect = session.conn, session.dialect
        destination = dialect.destination(options.queue)
        tx = None
        node_rate = spec.rate * len(items) / spec.count if spec.rate and spec.count else None
        started = time.monotonic()
        for n, (i, group, pos) in enumerate(items):
            if node_rate is not None:
                ahead = started + n / node_rate - time.monotonic()
                if ahead > PACE_SLACK_S:
                    if tx is not None:
                        _commit(conn, listener, tx, node)
                        tx, done[slot] = None, n
                    time.sleep(ahead)
            if tx is None:
                tx = conn.begin()
            headers = dialect.send_headers(group, options.group_id_header)
            headers["loadgen_id"] = str(i)
            if node_rate is not None:
                headers["loadgen_sent_ms"] = str(int(time.time() * 1000))
            if group is not None:
                headers["loadgen_group_seq"] = str(pos)
            if spec.persistent:
                headers["persistent"] = "true"
            conn.send(destination, _body(i, spec.size), headers=headers, transaction=tx)
            if (n + 1) % spec.transaction_size == 0 or n + 1 == len(items):
                _commit(conn, listener, tx, node)
                tx, done[slot] = None, n + 1
        return len(items)


def _commit(conn: stomp.Connection12, listener: StompListener, tx: str, node: Node) -> None:
    try:
        commit_with_receipt(conn, listener, tx, COMMIT_TIMEOUT_S)
    except LinkLost as exc:
        raise NodeUnavailable(node, f"COMMIT not confirmed: {exc}") from None


def print_progress(done: int, total: int) -> None:
    print(f"produced {done}/{total}", file=sys.stderr, flush=True)


__all__ = ["LoadSpec", "plan", "produce", "print_progress"]
