"""One way to open a node: connect, log in and know its dialect, closed whatever happens.

Every STOMP client of the connector (reader link, browse, publisher, staging mover, broker
move, discovery, and the development tools' plain clients) needs the same three steps; doing
them here means a dialect that cannot be resolved (``flavor=auto`` against an unknown server)
never leaves a logged-in connection behind, and "the first node that answers" is one loop
with one error naming every node.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import stomp

from clustermq.broker.connection_options import ConnectionOptions
from clustermq.broker.dialect import BrokerDialect, resolve_dialect
from clustermq.broker.nodes import Node
from clustermq.broker.reachability import no_node_reachable
from clustermq.broker.stomp_connection import close_connection, open_connection
from clustermq.errors import NodeUnavailable


@dataclass(frozen=True)
class NodeSession:
    """A logged-in connection to one node and what the node said about itself."""

    node: Node
    conn: stomp.Connection12
    dialect: BrokerDialect
    #: the CONNECTED frame's headers (``server``, ``heart-beat``, ``session``)
    connected: dict[str, str]

    def close(self) -> None:
        """Close without acknowledging: unacknowledged messages go back to the broker."""
        close_connection(self.conn)

    def __enter__(self) -> NodeSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def open_node(
    node: Node,
    options: ConnectionOptions,
    listener: stomp.ConnectionListener | None = None,
    listener_name: str = "clustermq",
    *,
    socket_timeout_s: float | None = None,
    client_id: str | None = None,
) -> NodeSession:
    """Connect to ``node`` and resolve its dialect; the caller owns the session and closes it,
    or opens it in a ``with`` block, which closes it (a request that ends with its caller).
    Raises :class:`~clustermq.errors.NodeUnavailable` like
    :func:`~clustermq.broker.stomp_connection.open_connection`.
    """
    conn, connected = open_connection(node, options, listener, listener_name,
                                      socket_timeout_s=socket_timeout_s, client_id=client_id)
    try:
        dialect = resolve_dialect(options.flavor, connected.get("server"))
    except BaseException:
        close_connection(conn)
        raise
    return NodeSession(node, conn, dialect, connected)


@contextmanager
def first_answering_node(
    nodes: Iterable[Node],
    options: ConnectionOptions,
    purpose: str,
) -> Iterator[NodeSession]:
    """A session with the first of ``nodes`` that answers (a cluster's nodes are one product
    with one login, so any of them can answer for all); :class:`NoNodeReachable` naming every
    node and why when none does. ``purpose`` completes "no broker node is reachable ...".

    It takes no listener: a node that refuses the login sends an ERROR frame to every listener
    of its attempt, so a shared one would start the next node's session marked lost. A caller
    that needs frames sets its listener on ``session.conn`` once the session is open.
    """
    failures: list[NodeUnavailable] = []
    for node in nodes:
        try:
            session = open_node(node, options)
        except NodeUnavailable as exc:
            failures.append(exc)
            continue
        try:
            yield session
        finally:
            session.close()
        return
    raise no_node_reachable(purpose, failures)
