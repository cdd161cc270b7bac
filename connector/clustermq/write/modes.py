"""Write modes: where a write's tasks publish, and how its commit and abort finish.

A mode is chosen once per job (batch write) or micro-batch (streaming write), on the driver,
before any task runs (:func:`choose_mode`); the writer pickles it to every task and each task
reports it back in its commit message, so the commit finishes the way the tasks published. A
mode is a plain value: it holds no connection, and a task never asks a broker which mode to use.

* :class:`Direct` (``writeMode=direct``): tasks commit straight into the queue; commit and abort
  only say what the tasks left there.
* :class:`JobStaging`: tasks stage into the job's staging queue on each node; the commit moves
  the winning attempts' messages over STOMP (:mod:`clustermq.write.staging` says why staging).
* :class:`AttemptStaging`: where the login may manage queues, each task attempt stages into its
  own queue per node with its final headers, and the commit moves inside the broker
  (:mod:`clustermq.write.broker_move` says why per attempt).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from clustermq.broker.dialect import BrokerDialect
from clustermq.options import WriteOptions
from clustermq.write.broker_move import login_manages_queues, move_attempts, purge_attempts
from clustermq.write.commit import Move, Purge, TaskReport, abort_staged, commit_staged, report_direct
from clustermq.write.headers import ID_HEADER, TARGET_HEADER, TASK_HEADER, staging_queue
from clustermq.write.staging import NodeMove, move_job, purge_job


class WriteMode(ABC):
    """Where tasks publish (:meth:`frame`) and how the driver commits (:meth:`commit`) and
    aborts (:meth:`abort`) what they published."""

    #: the tasks publish into the queue itself: nothing is staged, nothing moved or dropped
    direct: ClassVar[bool] = False

    @abstractmethod
    def frame(self, route: TaskRoute, index: int, dialect: BrokerDialect,
              headers: dict[str, str]) -> tuple[str, dict[str, str]]:
        """Destination and SEND headers of a message a task sends to node ``index``;
        ``headers`` (the message's own plus the node's group headers) may be changed in place."""

    @abstractmethod
    def commit(self, options: WriteOptions, what: str, job_id: str,
               tasks: Sequence[TaskReport]) -> list[NodeMove]:
        """Make the winning attempts' messages visible in their queues and say so."""

    @abstractmethod
    def abort(self, options: WriteOptions, what: str, job_id: str | None,
              tasks: Sequence[TaskReport]) -> None:
        """Drop what the job staged (``job_id`` ``None``: no task reported) and say so."""


@dataclass(frozen=True)
class TaskRoute:
    """Where one task attempt's messages go: its write's mode, queue (or topic), job and
    attempt tag."""

    mode: WriteMode
    queue: str
    job_id: str
    task_tag: str
    #: ``queue`` names a topic (option ``topic``)
    topic: bool = False

    def frame(self, index: int, dialect: BrokerDialect, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
        return self.mode.frame(self, index, dialect, headers)


def _final(headers: dict[str, str], dialect: BrokerDialect) -> str:
    """Give a message the headers its copy in the queue has (the duplicate id the mover would
    add, no task header, no target header); returns the queue it is for."""
    target = headers.pop(TARGET_HEADER)
    del headers[TASK_HEADER]
    headers.update(dialect.duplicate_id_headers(headers[ID_HEADER]))
    return target


@dataclass(frozen=True)
class Direct(WriteMode):
    """Each task commits into the messages' own queues (see ``publisher`` on re-sent ids)."""

    direct: ClassVar[bool] = True

    def frame(self, route: TaskRoute, index: int, dialect: BrokerDialect,
              headers: dict[str, str]) -> tuple[str, dict[str, str]]:
        destination, routing = dialect.target(_final(headers, dialect), route.topic)
        headers.update(routing)
        return destination, headers

    def commit(self, options: WriteOptions, what: str, job_id: str,
               tasks: Sequence[TaskReport]) -> list[NodeMove]:
        report_direct(options, f"{what} committed", tasks)
        return []

    def abort(self, options: WriteOptions, what: str, job_id: str | None,
              tasks: Sequence[TaskReport]) -> None:
        report_direct(options, f"{what} aborted", tasks, warning=True)


class _Staged(WriteMode):
    """A mode whose tasks stage: the commit moves with ``_move``, the abort drops with ``_purge``."""

    _move: ClassVar[Move]
    _purge: ClassVar[Purge]

    def commit(self, options: WriteOptions, what: str, job_id: str,
               tasks: Sequence[TaskReport]) -> list[NodeMove]:
        return commit_staged(options, what, job_id, tasks, type(self)._move)

    def abort(self, options: WriteOptions, what: str, job_id: str | None,
              tasks: Sequence[TaskReport]) -> None:
        abort_staged(options, what, job_id, type(self)._purge)


@dataclass(frozen=True)
class JobStaging(_Staged):
    """Every task of a job stages into one queue per node, with its staging headers; the
    commit moves the winners' messages over STOMP."""

    _move = move_job
    _purge = purge_job

    def frame(self, route: TaskRoute, index: int, dialect: BrokerDialect,
              headers: dict[str, str]) -> tuple[str, dict[str, str]]:
        return dialect.destination(staging_queue(route.queue, route.job_id, index)), headers


@dataclass(frozen=True)
class AttemptStaging(_Staged):
    """Every task attempt stages into its own queue per node, with the final headers (the
    target header only for a row not for the ``queue`` option); the commit moves inside the
    broker."""

    _move = move_attempts
    _purge = purge_attempts

    def frame(self, route: TaskRoute, index: int, dialect: BrokerDialect,
              headers: dict[str, str]) -> tuple[str, dict[str, str]]:
        target = _final(headers, dialect)
        if target != route.queue:
            headers[TARGET_HEADER] = target
        return dialect.destination(staging_queue(route.queue, route.job_id, index, route.task_tag)), headers


def choose_mode(options: WriteOptions, unreachable_fails: bool = False, expiring: bool = False) -> WriteMode:
    """The mode of a write with ``options``, on the driver: ``writeMode=direct`` is
    :class:`Direct` (no broker asked); a topic's is :class:`JobStaging`, because the brokers'
    own move targets queues; otherwise the first node that answers says whether the login may
    manage queues (:class:`AttemptStaging`) or not (:class:`JobStaging`).

    When no node answers: with ``unreachable_fails`` :class:`NoNodeReachable` naming every node
    and why (a batch write fails before any task runs); otherwise :class:`JobStaging` (a
    streaming write's tasks report the nodes they could not reach). ``expiring``: the input
    sets ``ttl``, which a broker's own move may clear (the dialect's ``move_keeps_expiration``).
    """
    if options.direct:
        return Direct()
    if options.connection.is_topic:
        return JobStaging()
    return AttemptStaging() if login_manages_queues(options, unreachable_fails, expiring) else JobStaging()
