"""The commit's move inside the broker, where the login may manage queues.

Why. The move over STOMP (:mod:`clustermq.write.staging`) costs broker round trips for every
message: a delivery to the driver, a second persistent SEND, an ACK. A broker that can move a
queue's messages itself over its management address (Artemis's ``moveMessages``, sent over
STOMP like the depth probe) does the same work without them (docs/design.md, "Writer modes").

How. Before any task runs, the driver asks one node whether the login may manage queues
(:func:`login_manages_queues`; the answer picks the write mode, write/modes.py). If it may,
every task attempt stages into *its own* queue per node, ``clustermq.staging.<queue>.<job>.
<attempt tag>.n<node index>``, with the message's final headers already: its duplicate id
(``_AMQ_DUPL_ID`` = ``clustermq_id``), no task header, the target header only for a row whose
``destination`` is not the ``queue`` option. Own queues per attempt are what let a staged copy
carry the final duplicate id: the broker keeps a duplicate-id cache per address, and a retried
attempt staging the same ids into a shared address would be refused.

The commit then, per node, on one connection: lists the job's staging queues; moves each
winning attempt's queue into ``queue`` inside the broker (the rows without a target header, in
staged order, on the same node; a copy whose id the queue's address already has, a re-run
batch's, is dropped there); moves whatever is left the STOMP way (rows for other destinations,
a move that failed part-way); and destroys every staging queue of the job on the node - the
emptied winners' and those of attempts Spark did not keep (a failed attempt's partial output,
a speculative duplicate, an in-doubt COMMIT that was re-sent elsewhere). ``abort()`` destroys
them all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from clustermq.broker.dialect import BrokerDialect
from clustermq.broker.listener import Inbox
from clustermq.broker.request import Requester
from clustermq.broker.session import NodeSession, first_answering_node, open_node
from clustermq.errors import DepthError, MoveError, NodeUnavailable, NoNodeReachable
from clustermq.options import WriteOptions
from clustermq.write.headers import TARGET_HEADER, staging_prefix, staging_queue
from clustermq.write.staging import NodeMove, StagedTask, StagingMover, move_failed

T = TypeVar("T")
#: rows whose copy goes to the ``queue`` option (the others carry the target header)
_DEFAULT_TARGET = f"{TARGET_HEADER} IS NULL"
#: messages per ``move_messages`` call, each one broker transaction. A call goes on in the broker
#: when the driver dies: the limit leaves the rest staged, as a killed STOMP move does; larger
#: calls were no faster (docs/decisions.md, "Writer modes and the move out of staging").
_MOVE_CALL = 500


def _managed(options: WriteOptions, index: int, work: Callable[[Requester, BrokerDialect], T]) -> T:
    """Run ``work`` on a request connection to node ``index``; ``NodeUnavailable`` or
    ``DepthError`` when the node cannot be asked."""
    inbox = Inbox()
    with open_node(options.connection.nodes[index], options.connection, inbox,
                      "clustermq-manage") as session:
        return work(_requester(options, session, inbox), session.dialect)


def _requester(options: WriteOptions, session: NodeSession, inbox: Inbox) -> Requester:
    return Requester(session.conn, inbox, time.monotonic() + options.receipt_timeout_s, keep_reply=True)


def login_manages_queues(options: WriteOptions, unreachable_fails: bool = False,
                         expiring: bool = False) -> bool:
    """Whether the login may manage queues, so the commit can move inside the broker: the
    first node that answers says (a cluster's nodes share one login). With ``expiring`` (the
    input sets ``ttl``) only where the broker's move keeps a message's expiration.

    When no node answers: with ``unreachable_fails`` (a batch write, asked once on the driver
    before any task runs) :class:`NoNodeReachable` naming every node and why; otherwise
    ``False`` (a streaming write's tasks report the nodes they could not reach).
    """
    try:
        with first_answering_node(options.connection.nodes, options.connection,
                                  f"for writing to queue '{options.connection.queue}'") as session:
            # attached once connected: a login refused with an ERROR frame by one node must
            # not leave the next node's connection marked lost
            inbox = Inbox()
            session.conn.set_listener("clustermq-manage", inbox)
            if expiring and not session.dialect.move_keeps_expiration:
                return False
            try:
                return session.dialect.can_manage(_requester(options, session, inbox))
            except DepthError:
                return False
    except NoNodeReachable:
        if unreachable_fails:
            raise
        return False


def move_attempts(
    options: WriteOptions, job_id: str, tasks: Iterable[StagedTask], default_queue: str,
    skip: Collection[str] = (),
) -> list[NodeMove]:
    """Move the winners' own staging queues into their queues, one thread per node, and
    destroy every staging queue of the job; ``skip`` names nodes not to sweep where nothing
    is to move (unreachable to the tasks).

    Raises :class:`MoveError` naming every node that failed, after all nodes finished: a
    failed node's remaining messages stay staged (not visible).
    """
    expected: dict[int, dict[str, int]] = {}
    for task in tasks:
        for index, count in task.counts.items():
            if count:
                expected.setdefault(index, {})[task.tag] = count
    nodes = options.connection.nodes
    indices = [i for i, n in enumerate(nodes) if i in expected or n.name not in skip]
    with ThreadPoolExecutor(max_workers=max(1, len(indices)), thread_name_prefix="clustermq-move") as pool:
        futures = {i: pool.submit(_move_node, options, job_id, default_queue, i, expected.get(i, {}))
                   for i in indices}
        results = {i: f.result() for i, f in futures.items()}
    failed = [r for i, r in results.items() if r.error and i in expected]
    if failed:
        raise move_failed(job_id, failed, f"{staging_prefix(default_queue, job_id)}<attempt>.n<i>")
    for r in results.values():  # a sweep that failed does not fail the commit
        if r.error:
            r.notes.append(f"left-overs not checked ({r.error})")
            r.error = None
    return [r for i, r in sorted(results.items()) if i in expected or r.dropped or r.notes]


def _move_node(options: WriteOptions, job_id: str, default_queue: str, index: int,
               expected: dict[str, int]) -> NodeMove:
    """One node's share of :func:`move_attempts`; never raises (the error is in the result)."""
    result = NodeMove(options.connection.nodes[index].name)
    started = time.monotonic()

    def work(requests: Requester, dialect: BrokerDialect) -> None:
        names = dialect.queue_names(requests, staging_prefix(default_queue, job_id))
        for tag, count in expected.items():
            name = staging_queue(default_queue, job_id, index, tag)
            if name not in names:
                raise MoveError(f"broker node {result.node}: staging queue {name} of "
                                f"{count} committed messages is missing")
            moved = _move_inside(options, requests, dialect, name, default_queue, result)
            requests.deadline = time.monotonic() + options.receipt_timeout_s
            left = dialect.queue_depth(requests, name) if moved < count else 0
            if left:
                _move_rest(options, index, name, default_queue, left, result)
            if moved + left != count:
                result.notes.append(f"{name}: {moved + left} staged messages moved of {count} committed")
        result.dropped += _destroy(options, requests, dialect, names, expected_names)

    expected_names = {staging_queue(default_queue, job_id, index, tag) for tag in expected}
    try:
        _managed(options, index, work)
    except (NodeUnavailable, MoveError, DepthError) as exc:
        result.error = str(exc)
    except Exception as exc:
        result.error = f"broker node {result.node}: {type(exc).__name__}: {exc}"
    result.seconds = time.monotonic() - started
    return result


def _move_inside(options: WriteOptions, requests: Requester, dialect: BrokerDialect, name: str,
                 default_queue: str, result: NodeMove) -> int:
    """Move staging queue ``name`` into ``default_queue`` inside the broker, ``_MOVE_CALL``
    messages per call until a call moves fewer; a failing call ends it (the rest goes over
    STOMP). Returns the count moved (or dropped as a duplicate) here."""
    moved = 0
    while True:
        requests.deadline = time.monotonic() + options.receipt_timeout_s
        try:
            step = dialect.move_messages(requests, name, default_queue, _DEFAULT_TARGET, _MOVE_CALL)
        except DepthError as exc:
            result.notes.append(f"moved over STOMP instead ({exc})")
            return moved
        moved += step
        result.moved += step
        result.in_broker += step
        if step < _MOVE_CALL:
            return moved


def _move_rest(options: WriteOptions, index: int, name: str, default_queue: str, left: int,
               result: NodeMove) -> None:
    """Move what the broker did not over STOMP (every message of an attempt's queue is a
    winner's); raises :class:`MoveError` if that fails."""
    rest = StagingMover(options, index, name, default_queue).run(left, None)
    result.moved += rest.moved
    result.notes.extend(rest.notes)
    if rest.error:
        raise MoveError(rest.error)


def _destroy(options: WriteOptions, requests: Requester, dialect: BrokerDialect,
             names: Iterable[str], moved: Collection[str]) -> int:
    """Destroy the staging queues ``names``; returns the messages dropped with them (what
    those not in ``moved``, the emptied winners', still held)."""
    dropped = 0
    for name in names:
        requests.deadline = time.monotonic() + options.receipt_timeout_s
        if name not in moved:
            dropped += dialect.queue_depth(requests, name)
        dialect.destroy_queue(requests, name)
    return dropped


def purge_attempts(options: WriteOptions, job_id: str, default_queue: str) -> list[NodeMove]:
    """Destroy every staging queue of a job on every node (``abort``); best effort, never
    raises: what a node could not destroy is its result's error."""

    def purge(index: int) -> NodeMove:
        result = NodeMove(options.connection.nodes[index].name)

        def work(requests: Requester, dialect: BrokerDialect) -> None:
            names = dialect.queue_names(requests, staging_prefix(default_queue, job_id))
            result.dropped += _destroy(options, requests, dialect, names, moved=())

        try:
            _managed(options, index, work)
        except Exception as exc:
            result.error = f"not purged ({exc})"
        return result

    nodes = range(len(options.connection.nodes))
    with ThreadPoolExecutor(max_workers=len(nodes), thread_name_prefix="clustermq-purge") as pool:
        return list(pool.map(purge, nodes))
