"""One writer task's publishing: a STOMP transaction per node, committed with a receipt, failover.

A task sends every message inside a transaction on the node the message is routed to and
COMMITs all of them at the end, each COMMIT confirmed by a RECEIPT: only a receipt proves the
broker stored the messages. Until then nothing the task sent exists for anyone.

Failover. Nodes are connected lazily, on their first message. A node that cannot be connected
is skipped: its messages go to the next node of the failover order (see ``load_balancing``). A
node lost while its transaction is open (send fails, the connection drops, the COMMIT gets no
receipt) takes the transaction with it - the broker discards an uncommitted transaction - so
the task re-sends that transaction's messages to the next reachable node. That is why every
message stays buffered until its transaction is confirmed: the input iterator cannot be replayed.
A COMMIT that got no receipt is *in doubt*: the broker may have committed it after all. The
messages are re-sent elsewhere and the in-doubt node is left out of the task's counts, so the
driver treats anything that did arrive there as garbage (see ``staging``).

Where and with which headers a message is sent is the write mode's (write/modes.py). Direct
mode (``writeMode`` ``direct``) sends into each message's own queue, with the ``_AMQ_DUPL_ID``
the mover would add. On Artemis a transaction holding an id the node already has fails its
whole COMMIT (a retried task's or a re-run batch's copies); its messages are then sent again
outside a transaction, where the node drops each duplicate alone and keeps the rest.
The ERROR does not say why ("AMQ339013 Error committing <tx>" and nothing more;
docs/broker-behaviour.md, "Duplicate ids"), so every refused COMMIT is re-sent so; if that
fails as well, the usual failover follows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import stomp

from clustermq.broker.dialect import BrokerDialect
from clustermq.broker.listener import BROKER_ERROR, StompListener, commit_with_receipt
from clustermq.broker.nodes import Node
from clustermq.broker.session import open_node
from clustermq.broker.stomp_connection import close_connection
from clustermq.errors import (
    HeaderNotCarried,
    LinkLost,
    MessageRefused,
    NodeUnavailable,
    NoWritableNode,
)
from clustermq.options import WriteOptions
from clustermq.write.headers import ID_HEADER
from clustermq.write.load_balancing import failover_order

if TYPE_CHECKING:
    from clustermq.write.modes import TaskRoute

log = logging.getLogger("clustermq.publisher")


#: how long a failed SEND waits for the ERROR frame that explains it: Classic writes ERROR and
#: closes the socket, so the sender's ``sendall`` can fail before the receiver thread read it
_ERROR_GRACE_S = 2.0


@dataclass
class Outgoing:
    """One message as the task built it, before node-specific (dialect) headers are added."""

    preferred: int
    headers: dict[str, str]
    body: bytes
    group_id: str | None
    #: where the message comes from, for errors ("row 3 of partition 1")
    label: str = ""
    #: the queue replies go to (``reply_to`` column), named in the node's dialect when sent
    reply_to: str | None = None


class _Link(StompListener):
    """A connection to one node, its open transaction and the messages sent in it."""

    def __init__(self, index: int, node: Node) -> None:
        super().__init__()
        self.index = index
        self.node = node
        self.conn: stomp.Connection12 | None = None
        self.dialect: BrokerDialect | None = None
        self.tx: str | None = None
        self.pending: list[Outgoing] = []


class TaskPublisher:
    """Publishes one task's messages; ``commit()`` returns the count committed on each node.

    ``route`` says where a message routed to a node is sent and with which headers (its write
    mode's staging queue on that node, or the message's own queue).
    """

    def __init__(self, options: WriteOptions, route: TaskRoute, task_label: str) -> None:
        self.options = options
        self.nodes = list(options.connection.nodes)
        self._route = route
        self._label = task_label
        self._links: dict[int, _Link] = {}
        self._dead: dict[int, str] = {}
        #: each node's failover order, looked up once per message (a pure function of the node)
        self._failover = [failover_order(i, len(self.nodes), options.priority)
                          for i in range(len(self.nodes))]
        self.counts: dict[int, int] = {}
        self.failovers = 0
        #: messages a node answered with an ERROR frame: id -> (message, node index -> ERROR)
        self._blame: dict[int, tuple[Outgoing, dict[int, str]]] = {}

    # ------------------------------------------------------------------ routing
    def _link_for(self, preferred: int) -> _Link:
        """The first reachable node of ``preferred``'s failover order (connecting if needed)."""
        for index in self._failover[preferred]:
            if index in self._dead:
                continue
            link = self._links.get(index)
            if link is not None:
                return link
            link = _Link(index, self.nodes[index])
            try:
                session = open_node(link.node, self.options.connection, link, "clustermq-publisher")
            except NodeUnavailable as exc:
                self._mark_dead(index, exc.reason)
                continue
            link.conn, link.dialect = session.conn, session.dialect
            self._links[index] = link
            return link
        raise NoWritableNode(
            f"{self._label}: no broker node is reachable for writing: "
            + "; ".join(f"{self.nodes[i].name}: {why}" for i, why in sorted(self._dead.items()))
        )

    def _mark_dead(self, index: int, reason: str) -> None:
        if index not in self._dead:
            log.warning("%s: node %s unavailable (%s); its messages go to the next node",
                        self._label, self.nodes[index].name, reason)
        self._dead[index] = reason

    # ------------------------------------------------------------------ sending
    def send(self, message: Outgoing) -> None:
        """Send inside the transaction of the node the message routes to (failing over).

        A node that answers with an ERROR frame is failed over like a lost one (the ERROR may
        be the node's, e.g. a full store). When no node is left and nodes refused a message,
        :class:`MessageRefused` names the row instead of reporting unreachable nodes.
        """
        while True:
            try:
                link = self._link_for(message.preferred)
            except NoWritableNode as exc:
                raise (self._refused() or exc) from None
            try:
                self._send_on(link, message)
                return
            except LinkLost as exc:
                reason = self._error_reason(link, str(exc))
                if reason.startswith(BROKER_ERROR):
                    # the ERROR surfaced while this message was written: it is the suspect
                    self._blame_on(link, [message], reason)
                self._lose(link, reason)

    @staticmethod
    def _error_reason(link: _Link, fallback: str) -> str:
        """The broker's ERROR text if the node sent one, else ``fallback``.

        Classic writes ERROR and closes the socket: the SEND fails on the closed socket,
        possibly before stomp.py's receiver thread has read the ERROR, hence the short wait.
        """
        if not link.lost.is_set():
            link.lost.wait(_ERROR_GRACE_S)
        return link.reason if link.reason.startswith(BROKER_ERROR) else fallback

    def _blame_on(self, link: _Link, messages: list[Outgoing], reason: str) -> None:
        for message in messages:
            _, nodes = self._blame.setdefault(id(message), (message, {}))
            nodes[link.index] = reason

    def _refused(self) -> MessageRefused | None:
        """The error naming the message most nodes refused, if any node refused one."""
        if not self._blame:
            return None
        most = max(len(nodes) for _, nodes in self._blame.values())
        suspects = [(m, nodes) for m, nodes in self._blame.values() if len(nodes) == most]
        message, refused = suspects[0]
        ident = message.headers.get(ID_HEADER)
        what = message.label or "a message"
        if ident:
            what += f" ({ID_HEADER} {ident})"
        if len(suspects) > 1:
            what += (f" or one of the {len(suspects) - 1} other messages committed with it (the "
                     "broker answered the transaction's COMMIT)")
        reasons = {**self._dead, **refused}
        return MessageRefused(
            f"{self._label}: {what} with a {len(message.body):,}-byte body was refused by the "
            "brokers: " + "; ".join(f"{self.nodes[i].name}: {why}" for i, why in sorted(reasons.items()))
        )

    def _send_on(self, link: _Link, message: Outgoing) -> None:
        if link.lost.is_set():
            raise LinkLost(link.reason or "connection lost")
        assert link.conn is not None and link.dialect is not None
        problem = link.dialect.header_value_problem(message.headers)
        if problem:
            raise HeaderNotCarried(f"{self._label}: {message.label or 'a message'}: {problem}")
        destination, headers = self._frame(link, message)
        try:
            if link.tx is None:
                link.tx = link.conn.begin()
            link.conn.send(destination, message.body, headers=headers, transaction=link.tx)
        except Exception as exc:
            raise LinkLost(f"send failed ({type(exc).__name__})") from None
        link.pending.append(message)

    def _frame(self, link: _Link, message: Outgoing) -> tuple[str, dict[str, str]]:
        """Destination and SEND headers of ``message`` on ``link``'s node (the route's)."""
        assert link.dialect is not None
        headers = dict(message.headers)
        headers.update(link.dialect.send_headers(message.group_id, self.options.connection.group_id_header))
        if message.reply_to is not None:
            # Classic makes JMSReplyTo of "/queue/<name>" only (a bare name stays a property)
            headers["reply-to"] = link.dialect.destination(message.reply_to)
        return self._route.frame(link.index, link.dialect, headers)

    def _resend_outside_transaction(self, link: _Link) -> bool:
        """Direct mode: send a link's messages again on a new connection, outside a transaction,
        the last with a receipt (the node handles a connection's frames in order, so it proves
        all stored). Used where the node refused the COMMIT of messages carrying duplicate ids,
        which it drops one by one outside a transaction. False if that failed too."""
        assert link.dialect is not None
        if not self._route.mode.direct or not link.pending or not link.dialect.drops_duplicates:
            return False
        fresh = _Link(link.index, link.node)
        fresh.dialect = link.dialect
        try:
            conn = fresh.conn = open_node(link.node, self.options.connection, fresh, "clustermq-publisher").conn
        except NodeUnavailable:
            return False
        *rest, last = link.pending
        try:
            for message in rest:
                destination, headers = self._frame(fresh, message)
                conn.send(destination, message.body, headers=headers)
            destination, headers = self._frame(fresh, last)
            fresh.confirm(lambda r: conn.send(destination, last.body, headers={**headers, "receipt": r}),
                          self.options.receipt_timeout_s, "send")
        except Exception:
            close_connection(conn)
            return False
        close_connection(link.conn)
        self._links[link.index] = fresh
        self.counts[link.index] = self.counts.get(link.index, 0) + len(link.pending)
        link.pending, link.tx = [], None
        return True

    def _lose(self, link: _Link, reason: str) -> None:
        """Drop a broken link and re-send its uncommitted messages to their next nodes."""
        self._mark_dead(link.index, reason)
        self._links.pop(link.index, None)
        close_connection(link.conn)
        orphans, link.pending, link.tx = link.pending, [], None
        if orphans:
            self.failovers += 1
            log.warning("%s: node %s lost with %d uncommitted messages; re-sending them to the "
                        "next node", self._label, link.node.name, len(orphans))
        for message in orphans:
            self.send(message)

    # ------------------------------------------------------------------ ending
    def commit(self) -> dict[int, int]:
        """COMMIT every open transaction and wait for its RECEIPT; fail over what is lost."""
        timeout = self.options.receipt_timeout_s
        while True:
            open_links = [l for l in self._links.values() if l.tx is not None and l.pending]
            if not open_links:
                return dict(self.counts)
            for link in open_links:
                if link.index not in self._links:
                    continue  # lost while committing an earlier link's failover
                assert link.conn is not None and link.tx is not None
                try:
                    commit_with_receipt(link.conn, link, link.tx, timeout)
                except LinkLost as exc:
                    reason = self._error_reason(link, str(exc))
                    if reason.startswith(BROKER_ERROR) and self._resend_outside_transaction(link):
                        log.warning("%s: node %s refused a COMMIT (%s); its messages were sent "
                                    "again outside a transaction, duplicates dropped by id",
                                    self._label, link.node.name, reason)
                        continue
                    if reason.startswith(BROKER_ERROR):
                        # an ERROR for a SEND arrives asynchronously, at the latest here: any
                        # message of the transaction may be the one the broker refused
                        self._blame_on(link, list(link.pending), reason)
                    self._lose(link, f"COMMIT not confirmed: {reason}")
                    continue
                self.counts[link.index] = self.counts.get(link.index, 0) + len(link.pending)
                link.pending, link.tx = [], None

    def abort(self) -> None:
        """ABORT every open transaction (closing the connection would roll back too)."""
        for link in list(self._links.values()):
            if link.tx is not None and link.conn is not None and not link.lost.is_set():
                try:
                    link.conn.abort(link.tx)
                except Exception:
                    pass
            link.pending, link.tx = [], None
        self.close()

    def close(self) -> None:
        for link in self._links.values():
            close_connection(link.conn)
        self._links.clear()

    @property
    def dead_nodes(self) -> dict[str, str]:
        return {self.nodes[i].name: why for i, why in self._dead.items()}
