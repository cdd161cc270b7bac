"""Queue depth per broker node over STOMP, each node asked in its own dialect.

In a network of brokers a queue has a separate depth on every node (messages move between nodes,
they are not shared), so the backlog of a queue is the per-node table plus its total. How a node
is asked depends on the broker (ActiveMQ Classic's statistics plugin, Artemis's management
address: see the dialects' ``queue_depth``); which broker it is, the CONNECTED frame's
``server`` header says.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from clustermq.broker.connection_options import ConnectionOptions, ReconnectPolicy, Secret, TopicSubscription
from clustermq.broker.dialect import detect_dialect
from clustermq.broker.listener import Inbox
from clustermq.broker.nodes import Node
from clustermq.broker.queue_names import destination_queue_name
from clustermq.broker.request import Requester
from clustermq.broker.stomp_connection import close_connection, open_connection
from clustermq.errors import DepthError, NodeUnavailable


class QueueDepths(dict):  # dict[str, int | None]
    """Depth per node name, in node order; ``None`` where the node could not be asked.

    ``errors`` maps the name of every such node to the reason.
    """

    def __init__(self, queue: str) -> None:
        super().__init__()
        self.queue = queue
        self.errors: dict[str, str] = {}

    @property
    def total(self) -> int:
        """Sum over the nodes that answered."""
        return sum(v for v in self.values() if v is not None)

    @property
    def complete(self) -> bool:
        """Whether every node answered (only then is ``total`` the queue's whole backlog)."""
        return not self.errors


def _probe_options(
    node: Node, queue: str, username: str | None, password: str | None, timeout: float
) -> ConnectionOptions:
    """How the probe connects: the caller's login, no heart-beats (it lives for one question)."""
    return ConnectionOptions(
        nodes=(node,), queues=(queue,), flavor="auto", username=username,
        password=Secret(password) if password is not None else None, group_id_header="",
        reconnect=ReconnectPolicy(), connect_timeout_s=timeout, heartbeat_ms=0,
    )


def queue_depth(node: Node, queue: str, username: str | None, password: str | None, timeout: float = 10.0,
                topic: TopicSubscription | None = None) -> int:
    """Depth of ``queue`` on one node (of ``topic``'s subscription, for a topic reader);
    ``DepthError`` when the node cannot tell.

    The login waits at most ``timeout`` s (the TCP connect at most 5 s of it), and the question
    and its answer must come within ``timeout`` s of the start.
    """
    name = destination_queue_name(queue)
    deadline = time.monotonic() + timeout
    inbox = Inbox()
    options = _probe_options(node, name, username, password, timeout)
    try:
        conn, connected = open_connection(node, options, inbox, "clustermq-depth",
                                          socket_timeout_s=max(0.5, min(timeout, 5.0)))
    except NodeUnavailable as exc:
        raise DepthError(str(exc)) from None
    try:
        dialect = detect_dialect(connected.get("server"))
        requests = Requester(conn, inbox, deadline)
        if topic is not None:
            return dialect.subscription_depth(requests, topic)
        return dialect.queue_depth(requests, name)
    finally:
        close_connection(conn)


def queue_depths(
    nodes: Iterable[Node],
    queue: str,
    username: str | None,
    password: str | None,
    timeout: float = 10.0,
    topic: TopicSubscription | None = None,
) -> QueueDepths:
    """Depth of ``queue`` on every node, asked in parallel; unreachable nodes map to ``None``.

    One node failing (down, refusing the login, plugin off) never hides the others' answers:
    its reason is in the result's ``errors``.
    """
    node_list: Sequence[Node] = list(nodes)
    name = destination_queue_name(queue)
    result = QueueDepths(name)
    if not node_list:
        return result
    with ThreadPoolExecutor(max_workers=len(node_list), thread_name_prefix="clustermq-depth") as pool:
        futures = [pool.submit(queue_depth, n, name, username, password, timeout, topic) for n in node_list]
        for node, future in zip(node_list, futures):
            try:
                result[node.name] = future.result()
            except Exception as exc:
                result[node.name] = None
                result.errors[node.name] = str(exc) or type(exc).__name__
    return result


def connection_depths(conn: ConnectionOptions) -> QueueDepths:
    """``queue_depths`` of the connector's queues (a topic reader's: its subscription's),
    connecting as the reader does (login, TLS settings, ``connectTimeout``). With several queues
    a node's depth is their sum, unknown (``None``) when any of them is: the reader's backlog on
    a node is all of its queues."""
    username, password = conn.login
    per_queue = [queue_depths(list(conn.nodes), q, username, password, timeout=conn.connect_timeout_s,
                              topic=conn.topic) for q in conn.queues]
    if len(per_queue) == 1:
        return per_queue[0]
    result = QueueDepths(conn.queue_names)
    for node in conn.nodes:
        depths = [d.get(node.name) for d in per_queue]
        result[node.name] = None if any(v is None for v in depths) else sum(v or 0 for v in depths)
        errors = [f"{d.queue}: {d.errors[node.name]}" for d in per_queue if node.name in d.errors]
        if errors:
            result.errors[node.name] = "; ".join(errors)
    return result


def format_depth_table(depths: QueueDepths) -> str:
    """A plain-text table: one row per node, then the total (flagged when incomplete)."""
    width = max([len("total"), len("node")] + [len(n) for n in depths])
    lines = [f"queue {depths.queue}", f"{'node':<{width}}  {'depth':>10}"]
    for name, depth in depths.items():
        if depth is None:
            lines.append(f"{name:<{width}}  {'?':>10}  ({depths.errors.get(name, 'no answer')})")
        else:
            lines.append(f"{name:<{width}}  {depth:>10}")
    total = f"{'total':<{width}}  {depths.total:>10}"
    if not depths.complete:
        total += f"  (incomplete: {len(depths.errors)} of {len(depths)} nodes did not answer)"
    lines.append(total)
    return "\n".join(lines)
