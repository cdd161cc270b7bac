"""Staging: a job's messages become visible in the queue only when Spark commits the job.

Why. Spark 4.2 does not tell a Python writer that its task failed: when an expression upstream
of the writer fails part-way (a UDF raising on one row), the writer's input iterator simply ends
and ``write()`` returns normally, with no exception. A task therefore cannot know whether
committing is right. And the alternative of publishing straight into the queue and removing a
failed job's messages in ``abort()`` does not hold on ActiveMQ Classic: a selector consumer
cannot reach matching messages behind more than ``maxPageSize`` (200) others, a browse shows
only the first 400, and ``abort()`` runs while sibling tasks are still writing (docs/design.md,
"The writer: stage, then publish on commit"; docs/broker-behaviour.md, "Selectors do not reach
deep messages" and "The browse limit").

How. Every task commits its messages (STOMP transaction + receipt) into a *staging queue* on the
node each message is routed to, ``clustermq.staging.<queue>.<job>.n<node index>``; no consumer of
``<queue>`` ever sees it. Only the driver's ``commit()`` - which Spark calls once every task has
succeeded - moves the messages of the winning task attempts into the destination queue *on the
same node* (so node placement, and with it group placement, is kept), in the order they were
staged, in transactions that SEND the message and ACK its staged copy together. Messages of task
attempts that are not winners (a failed attempt's partial output, a speculative duplicate, an
in-doubt COMMIT that was re-sent elsewhere) are dropped. ``abort()`` and the end of every move
drop whatever is left in the job's staging queues.

Staging queue names carry the node index, not just the job: in a network of brokers a consumer
on one node attracts messages of the *same queue name* from the other nodes, which would move a
group's messages to the wrong node.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from clustermq.broker.depth import queue_depth
from clustermq.broker.dialect import BrokerDialect
from clustermq.broker.frames import message_headers
from clustermq.broker.listener import Inbox, commit_with_receipt
from clustermq.broker.session import open_node
from clustermq.errors import LinkLost, MoveError, NodeUnavailable
from clustermq.options import WriteOptions
from clustermq.write.headers import (
    ID_HEADER,
    TARGET_HEADER,
    TASK_HEADER,
    staging_prefix,
    staging_queue,
)

log = logging.getLogger("clustermq.staging")

#: headers of a staged message the mover re-derives or drops (besides the broker's own)
_REDERIVED = frozenset({"persistent", "JMSXGroupID", TASK_HEADER, TARGET_HEADER})
_MOVE_CHUNK = 200  # messages per move transaction (see _drain on why not more)
_IDLE_COMMIT_S = 0.5
_PREFETCH = 1000
_PURGE_WAIT_S = 5.0


@dataclass(frozen=True)
class StagedTask:
    """What the driver needs to know about one winning task attempt."""

    tag: str
    counts: Mapping[int, int]  # node index -> messages committed to that node's staging queue


@dataclass
class NodeMove:
    node: str
    moved: int = 0
    in_broker: int = 0  # of ``moved``: moved by the broker itself (broker_move.py)
    dropped: int = 0
    seconds: float = 0.0
    error: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class _Chunk:
    """The part of a move not settled yet (see ``StagingMover._drain``)."""

    transactional: bool
    tx: str | None = None
    size: int = 0
    acks: list[str] = field(default_factory=list)  # staged copies delivered in the chunk
    held: tuple[str, bytes, dict[str, str]] | None = None  # last final copy, sent with a receipt

    def reset(self) -> None:
        self.tx, self.size, self.held = None, 0, None
        self.acks = []


def final_headers(staged: Mapping[str, str], dialect: BrokerDialect, options: WriteOptions) -> dict[str, str]:
    """The SEND headers of a staged message's final copy: the sender's own headers, group
    headers re-derived (Classic does not return ``JMSXGroupID``), delivery-only ones dropped."""
    headers = message_headers(staged, resend=True, drop=_REDERIVED | dialect.added_headers())
    if headers.get("expires") == "0":
        del headers["expires"]
    group_header = options.connection.group_id_header
    headers.update(dialect.send_headers(headers.get(group_header) or None, group_header))
    if options.persistent:
        headers["persistent"] = "true"
    if ID_HEADER in headers:
        headers.update(dialect.duplicate_id_headers(headers[ID_HEADER]))
    return headers


class StagingMover:
    """Moves (or drops) the messages of one staging queue on one node."""

    def __init__(self, options: WriteOptions, index: int, staging: str, default_queue: str) -> None:
        self.options = options
        self.index = index
        self.node = options.connection.nodes[index]
        self.staging = staging
        self.default_queue = default_queue
        self.result = NodeMove(self.node.name)

    def run(self, expected: int, winners: frozenset[str] | None) -> NodeMove:
        """Move ``expected`` messages of ``winners`` (``None``: every one, an attempt's own
        staging queue), dropping any other staged message met."""
        return self._guarded(lambda conn, inbox, dialect: self._move(conn, inbox, dialect, expected, winners))

    def drop(self, count: int) -> NodeMove:
        """Drop up to ``count`` staged messages (a failed job's); waits at most a few seconds."""
        return self._guarded(lambda conn, inbox, dialect: self._drain(
            conn, inbox, dialect, count, frozenset(),
            min(self.options.receipt_timeout_s, _PURGE_WAIT_S), forward=False))

    def _guarded(self, work: Any) -> NodeMove:
        started = time.monotonic()
        try:
            inbox = Inbox()
            with open_node(self.node, self.options.connection, inbox, "clustermq-mover") as session:
                dialect = session.dialect
                session.conn.subscribe(
                    destination=dialect.destination(self.staging), id="clustermq-move",
                    # cumulative where the chunk is a transaction (see _drain)
                    ack="client" if dialect.transactional_ack else "client-individual",
                    headers=dialect.subscribe_headers(_PREFETCH, 1 << 24),
                )
                work(session.conn, inbox, dialect)
        except (NodeUnavailable, MoveError) as exc:
            self.result.error = str(exc)
        except LinkLost as exc:
            self.result.error = f"broker node {self.node.name}: connection lost ({exc})"
        except Exception as exc:
            self.result.error = f"broker node {self.node.name}: {type(exc).__name__}: {exc}"
        finally:
            self.result.seconds = time.monotonic() - started
        return self.result

    def _move(self, conn: Any, inbox: Inbox, dialect: BrokerDialect, expected: int,
              winners: frozenset[str] | None) -> None:
        timeout = self.options.receipt_timeout_s
        self._drain(conn, inbox, dialect, expected, winners, timeout, forward=True)
        leftover = self._leftover()
        if leftover:
            self.result.notes.append(f"{leftover} left-over staged messages dropped")
            self._drain(conn, inbox, dialect, leftover, frozenset(), min(timeout, _PURGE_WAIT_S),
                        forward=False)

    def _drain(
        self, conn: Any, inbox: Inbox, dialect: BrokerDialect, wanted: int,
        winners: frozenset[str] | None, timeout: float, forward: bool,
    ) -> None:
        """Consume until ``wanted`` winners were moved (``forward``) or ``wanted`` dropped.

        Classic 5.18 sometimes stops dispatching while a transaction holds many uncommitted
        ACKs (docs/broker-behaviour.md, "Smaller Classic facts", "Transactions of many ACKs").
        Chunks of at most half the prefetch, settled whenever deliveries pause (which is how
        such a stall ends), keep dispatch going; 200 per chunk (docs/design.md, "The writer: stage,
        then publish on commit", "How", says why).

        Classic: a chunk is one transaction that SENDs the final copies and ACKs the staged
        ones with a single cumulative ACK (``ack=client``) before the COMMIT, not one
        ``client-individual`` ACK per message: Classic applies each of those as an
        acknowledgement of its own and keeps them all in a list that only a ``client``
        subscription's COMMIT clears, which makes each COMMIT about three times as slow
        (docs/broker-behaviour.md, "Smaller Classic facts", "Transacted individual ACKs").

        Artemis applies a transactional ACK at once (even if the COMMIT never comes), and a
        duplicate ``_AMQ_DUPL_ID`` inside a transaction fails the whole COMMIT, the other
        messages rolled back (docs/broker-behaviour.md, "An ACK inside a transaction is applied
        at once" and "Duplicate ids"), which would make a re-run move of a half-moved job fail
        forever. So there final copies are sent outside
        any transaction - the broker silently drops one whose id it already has, which makes
        the move idempotent - and the staged copies are ACKed once the last SEND's RECEIPT
        proves the chunk stored (see ``_settle``).
        """
        chunk = _Chunk(transactional=dialect.transactional_ack)
        done = 0
        deadline = time.monotonic() + timeout
        while done < wanted:
            frame = inbox.next(_IDLE_COMMIT_S if chunk.size else max(0.0, deadline - time.monotonic()))
            if frame is None:
                if chunk.size:  # deliveries paused: settle the ACKs so the broker pages in more
                    self._settle(conn, inbox, chunk)
                    continue
                if not forward:
                    break  # best effort: the rest is garbage nobody consumes
                raise MoveError(
                    f"broker node {self.node.name}: only {self.result.moved} of {wanted} staged "
                    f"messages arrived from {self.staging} within {timeout:.0f} s"
                )
            deadline = time.monotonic() + timeout
            if chunk.transactional and chunk.tx is None:
                chunk.tx = conn.begin()
            headers = frame.headers
            if forward and (winners is None or headers.get(TASK_HEADER) in winners):
                target = headers.get(TARGET_HEADER) or self.default_queue
                destination, routing = dialect.target(target, self.options.connection.is_topic)
                final = (destination, frame.body, {**final_headers(headers, dialect, self.options), **routing})
                if chunk.transactional:
                    conn.send(final[0], final[1], headers=final[2], transaction=chunk.tx)
                else:
                    if chunk.held is not None:
                        conn.send(chunk.held[0], chunk.held[1], headers=chunk.held[2])
                    chunk.held = final
                self.result.moved += 1
                done += 1
            else:
                self.result.dropped += 1
                if not forward:
                    done += 1
            chunk.acks.append(headers["ack"])
            chunk.size += 1
            if chunk.size >= _MOVE_CHUNK or done >= wanted:
                self._settle(conn, inbox, chunk)
        if chunk.size:
            self._settle(conn, inbox, chunk)

    def _settle(self, conn: Any, inbox: Inbox, chunk: _Chunk) -> None:
        """Make a chunk durable: ACK cumulatively and COMMIT its transaction, or (Artemis)
        confirm its SENDs, then ACK.

        Without a transaction the last final copy is sent with a receipt; the broker handles a
        connection's frames in order, so its RECEIPT means every SEND of the chunk is stored.
        Only then are the staged copies ACKed, the last ACK again with a receipt so they are
        gone when this returns (the left-over depth check relies on that). A crash in between
        leaves staged copies that a later move sends again; their ``_AMQ_DUPL_ID`` makes the
        broker drop them.
        """
        timeout = self.options.receipt_timeout_s
        try:
            if chunk.tx is not None:
                conn.ack(chunk.acks[-1], transaction=chunk.tx)  # every delivery up to it
                commit_with_receipt(conn, inbox, chunk.tx, timeout)
            else:
                if chunk.held is not None:
                    destination, body, headers = chunk.held
                    inbox.confirm(lambda r: conn.send(destination, body, headers={**headers, "receipt": r}),
                                  timeout, "send")
                if chunk.acks:
                    for ack_id in chunk.acks[:-1]:
                        conn.ack(ack_id)
                    last = chunk.acks[-1]
                    inbox.confirm(lambda r: conn.ack(last, receipt=r), timeout, "ack")
        except LinkLost:
            raise
        except Exception as exc:
            raise LinkLost(f"settling a move chunk failed ({type(exc).__name__})") from None
        chunk.reset()

    def _leftover(self) -> int:
        """Messages still in the staging queue after the move (garbage); 0 if unknown."""
        username, password = self.options.connection.login
        try:
            return queue_depth(self.node, self.staging, username, password,
                               timeout=self.options.connection.connect_timeout_s)
        except Exception as exc:
            self.result.notes.append(f"left-overs not checked ({exc})")
            return 0


def move_failed(job_id: str, failed: Iterable[NodeMove], staging: str) -> MoveError:
    """The commit's error once every node finished: which nodes failed and where the rest is."""
    return MoveError(
        f"job {job_id}: moving staged messages into the queue failed on "
        + "; ".join(r.error or "" for r in failed)
        + f". Messages already moved on the other nodes stay in the queue; the rest stay in the "
        f"staging queues {staging}"
    )


def move_job(
    options: WriteOptions, job_id: str, tasks: Iterable[StagedTask], default_queue: str,
    skip: Collection[str] = (),
) -> list[NodeMove]:
    """Move the winners' staged messages into their queues, one thread per node, and drop what
    losing attempts staged on the other nodes (``random`` draws a node per attempt, a failover
    moves one); ``skip`` names nodes not to sweep (unreachable to the tasks). A swept node is
    in the result only when something was dropped there or it could not be asked.

    Raises :class:`MoveError` naming every node that failed, after all nodes finished: a node
    that failed leaves its remaining messages staged (not visible); the other nodes' moves are
    complete.
    """
    expected: dict[int, int] = {}
    winners: dict[int, set[str]] = {}
    for task in tasks:
        for index, count in task.counts.items():
            if count:
                expected[index] = expected.get(index, 0) + count
                winners.setdefault(index, set()).add(task.tag)
    if not expected:
        return []
    movers = {
        i: StagingMover(options, i, staging_queue(default_queue, job_id, i), default_queue) for i in expected
    }
    idle = [i for i, n in enumerate(options.connection.nodes) if i not in expected and n.name not in skip]
    with ThreadPoolExecutor(max_workers=len(movers) + len(idle), thread_name_prefix="clustermq-move") as pool:
        futures = {i: pool.submit(m.run, expected[i], frozenset(winners[i])) for i, m in movers.items()}
        sweeps = [pool.submit(_purge_node, options, job_id, default_queue, i) for i in idle]
        results = [futures[i].result() for i in sorted(futures)]
        swept = [f.result() for f in sweeps]
    failed = [r for r in results if r.error]
    if failed:
        raise move_failed(job_id, failed, f"{staging_prefix(default_queue, job_id)}n<i>")
    for r in swept:  # best effort: a node that cannot be asked does not fail the commit
        if r.error:
            r.notes.append(f"left-overs not checked ({r.error})")
            r.error = None
    return results + [r for r in swept if r.dropped or r.notes]


def _purge_node(options: WriteOptions, job_id: str, default_queue: str, index: int) -> NodeMove:
    """Drop everything in the job's staging queue on node ``index``; never raises."""
    node = options.connection.nodes[index]
    staging = staging_queue(default_queue, job_id, index)
    username, password = options.connection.login
    try:
        depth = queue_depth(node, staging, username, password, timeout=options.connection.connect_timeout_s)
    except Exception as exc:
        return NodeMove(node.name, error=f"not purged ({exc})")
    if not depth:
        return NodeMove(node.name)
    return StagingMover(options, index, staging, default_queue).drop(depth)


def purge_job(options: WriteOptions, job_id: str, default_queue: str) -> list[NodeMove]:
    """Drop everything staged by a job on every node (``abort``); best effort, never raises."""
    nodes = range(len(options.connection.nodes))
    with ThreadPoolExecutor(max_workers=len(nodes), thread_name_prefix="clustermq-purge") as pool:
        return list(pool.map(lambda i: _purge_node(options, job_id, default_queue, i), nodes))
