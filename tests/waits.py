"""Waits that explain themselves: poll a condition to a deadline, and on timeout say what the
cluster looked like.

A wait that only says "timed out" turns a failing CI run into a guess: a message can be late
behind a stalled Classic bridge, stranded on an Artemis node, dead-lettered, or simply never
sent. So every wait on the brokers takes an ``explain`` callable, and :func:`cluster_state`
gives the state that tells these apart: the ids still missing, the depth of the queue and of
the dead-letter queue on every node, Artemis's own counters of the queue, and the tail of each
broker's log.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")

#: broker log lines a failure message carries per node: enough for the last few WARN/ERROR
#: lines around a fault, short enough to keep the failure readable
LOG_TAIL_LINES = 12
#: missing ids a failure message lists by value (the count is always given)
MISSING_SHOWN = 20


def poll(check: Callable[[], T], timeout: float, what: str, interval: float = 0.25,
         explain: Callable[[], str] | None = None) -> T:
    """Call ``check`` until it returns something truthy and return that; at the deadline fail
    naming ``what`` and, when given, the state ``explain()`` describes."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            message = f"timed out after {timeout:.0f} s waiting for {what}"
            if explain is not None:
                message += "\n" + _safely(explain)
            raise AssertionError(message)
        time.sleep(interval)


def wait_for(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.25,
             explain: Callable[[], str] | None = None) -> None:
    """:func:`poll` for a condition whose value is not needed."""
    poll(condition, timeout, what, interval, explain)


def dead_letters(broker: Any) -> str:
    """The dead-letter queue of the local clusters (their broker templates name it)."""
    return "ActiveMQ.DLQ" if broker.flavor == "classic" else "DLQ"


def missing_ids(wanted: Iterable[int], seen: Iterable[int]) -> str:
    """``N missing: [first ids]``; empty when none is missing."""
    missing = sorted(set(wanted) - set(seen))
    return f"{len(missing)} missing: {missing[:MISSING_SHOWN]}" if missing else ""


def artemis_queue_state(broker: Any, queue: str) -> dict[str, dict[str, object]]:
    """Per node, Artemis's own counters of ``queue``: a message counted in ``messageCount`` but
    neither scheduled nor in ``deliveringCount`` while consumers are attached is held outside
    the queue's delivery (docs/broker-behaviour.md, "A message stranded after a killed driver")."""
    import dataclasses

    from clustermq.broker.dialect.artemis_dialect import _management_request
    from clustermq.broker.listener import Inbox
    from clustermq.broker.request import Requester
    from clustermq.broker.session import open_node

    attributes = ("messageCount", "deliveringCount", "scheduledCount", "consumerCount",
                  "messagesAdded", "messagesAcknowledged")
    state: dict[str, dict[str, object]] = {}
    for node in broker.cluster.nodes():
        options = dataclasses.replace(broker.connection(queue), nodes=(node,), heartbeat_ms=0)
        try:
            inbox = Inbox()
            with open_node(node, options, inbox, "clustermq-state") as session:
                requests = Requester(session.conn, inbox, time.monotonic() + 10)
                answers = [_management_request(requests, f"queue.{queue}", a) for a in attributes]
                state[node.name] = ({a: value for a, (_, value) in zip(attributes, answers)}
                                    if answers[0][0] else {"queue": "not on this node"})
        except Exception as exc:  # a diagnostic must not hide the failure it explains
            state[node.name] = {"error": str(exc)}
    return state


def cluster_state(broker: Any, queue: str, wanted: Iterable[int] = (), seen: Iterable[int] = (),
                  log_lines: int = LOG_TAIL_LINES) -> str:
    """What a failed wait on ``queue`` needs to be understood, one part per line: ids missing
    (of ``wanted`` not in ``seen``), depth per node, dead-letter depth per node, Artemis's
    counters, and the tail of every broker's log. Each part that cannot be read says why."""
    from clustermq.broker.depth import queue_depths

    parts = []
    missing = missing_ids(wanted, seen)
    if missing:
        parts.append(f"ids {missing}")
    username, password = broker.cluster.credentials
    nodes = list(broker.cluster.nodes())
    for name, target in (("depth", queue), ("dead letters", dead_letters(broker))):
        parts.append(f"{name} per node: " + _safely(lambda t=target: str(dict(
            queue_depths(nodes, t, username, password)))))
    if broker.flavor == "artemis":
        parts.append("artemis counters: " + _safely(lambda: str(artemis_queue_state(broker, queue))))
    for member in broker.cluster.state().nodes:  # every member of a failover pair too
        running = _safely(lambda i=member.index: str(broker.cluster.is_running(i)))
        rejected = _safely(lambda i=member.index: _duplicates_rejected(broker.cluster.log_since(i, 0)))
        tail = _safely(lambda i=member.index: broker.cluster.log_tail(i, log_lines))
        parts.append(f"broker {member.name} member {member.index} (running: {running}; {rejected}) "
                     f"log tail:\n{tail}")
    return "\n".join(parts)


def log_marks(broker: Any) -> dict[int, int]:
    """Where every member's broker log ends now, to read what it writes from here on."""
    return {m.index: broker.cluster.log_size(m.index) for m in broker.cluster.state().nodes}


def bridge_failures(broker: Any, marks: dict[int, int]) -> list[str]:
    """The lines in which a Classic node's network bridge failed since ``marks``
    (:func:`log_marks`): such a bridge sends again what it had not seen acknowledged
    (docs/broker-behaviour.md, "Copies made by a failed bridge")."""
    return [line for index, offset in marks.items()
            for line in broker.cluster.log_since(index, offset).splitlines()
            if "Network connection between" in line and "shutdown due to" in line]


def _duplicates_rejected(log: str) -> str:
    """Classic's store refuses a second copy of a message it holds; a copy that crossed back and
    forth between two nodes can cost both copies, so the count and the first one are shown."""
    lines = [line for line in log.splitlines() if "Duplicate message add attempt rejected" in line]
    return f"{len(lines)} duplicate adds rejected" + (f", the first: {lines[0][:300]}" if lines else "")


def _safely(describe: Callable[[], str]) -> str:
    """A diagnostic that fails says so instead of replacing the failure it explains."""
    try:
        return describe()
    except Exception as exc:
        return f"<unavailable: {type(exc).__name__}: {exc}>"
