"""What a broker does with a message that is delivered again and again and never acknowledged.

This is what a query that keeps failing does to the messages it holds: each failed or killed run
closes its connections with the messages of its batch (and of its prefetch window) delivered and
not acknowledged, and the next run gets them again. Whether the broker ever gives up decides
whether such a message can leave the queue without reaching the table, so it is measured here,
per flavor, with a plain stomp.py client (docs/broker-behaviour.md, "Delivery attempts and the
dead-letter address"):

* Artemis counts every such delivery and, at ``max-delivery-attempts`` (10, its default, kept by
  the local cluster), moves the message to the dead-letter address (``DLQ``) with its original
  queue in ``_AMQ_ORIG_QUEUE``; no STOMP frame carries the count, only ``redelivered``.
* Classic over STOMP never gives up: the broker applies no redelivery limit of its own (the
  OpenWire JMS client's ``RedeliveryPolicy`` does, or a broker ``redeliveryPlugin``), so the
  message stays on the queue and ``ActiveMQ.DLQ`` gets nothing.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from test_artemis import close, plain_client, subscribe
from waits import dead_letters, poll

pytestmark = [pytest.mark.cluster]

#: Artemis's default ``max-delivery-attempts``, which the local cluster keeps
ARTEMIS_MAX_DELIVERY_ATTEMPTS = 10
#: deliveries asked of Classic: past Artemis's limit, so a limit of Classic's own at the same
#: default would show
CLASSIC_ATTEMPTS = ARTEMIS_MAX_DELIVERY_ATTEMPTS + 2
NODE = 0


def subscription_name(broker: Any, queue: str) -> str:
    return f"/queue/{queue}" if broker.flavor == "classic" else queue


def deliver(broker: Any, queue: str, attempt: int, ack: str = "client-individual") -> Any:
    """One consumer that receives the message and disconnects, by default without an ACK (with
    ``ack="auto"`` the delivery consumes it); its frame."""
    conn, frames = plain_client(broker, NODE)
    try:
        subscribe(conn, frames, subscription_name(broker, queue), f"attempt-{attempt}", ack)
        return poll(lambda: frames.messages() or None, 30, f"delivery {attempt + 1} of {queue}",
                    explain=lambda: f"depths {broker.depths(queue)}, dead letters "
                                    f"{broker.depths(dead_letters(broker))}")[0]
    finally:
        close(conn)


def node_depth(broker: Any, queue: str) -> int:
    return broker.depths(queue)[broker.cluster.nodes()[NODE].name] or 0


def take_dead_letter(broker: Any, queue: str) -> list[Any]:
    """The dead letters of ``queue`` on the node, consumed (and acknowledged) by a selector."""
    conn, frames = plain_client(broker, NODE)
    try:
        subscribe(conn, frames, subscription_name(broker, dead_letters(broker)), "dead", "auto",
                  selector=f"_AMQ_ORIG_QUEUE = '{queue}'")
        return poll(frames.messages, 30, f"the dead letter of {queue}")
    finally:
        close(conn)


def test_a_message_never_acknowledged_is_dead_lettered_by_artemis_at_its_limit_and_kept_by_classic(
    broker: Any,
) -> None:
    queue = f"test.attempts.{uuid.uuid4().hex[:8]}"
    dead_before = node_depth(broker, dead_letters(broker))
    broker.produce(queue, 1, nodes=[NODE])
    attempts = ARTEMIS_MAX_DELIVERY_ATTEMPTS if broker.flavor == "artemis" else CLASSIC_ATTEMPTS
    frames = [deliver(broker, queue, i) for i in range(attempts)]

    flags = [f.headers.get("redelivered") for f in frames]
    ids = {f.headers["loadgen_id"] for f in frames}
    print(f"\n[{broker.flavor}] {attempts} deliveries of one message, redelivered flags {flags}")
    assert ids == {"0"}, f"other messages than the one produced were delivered: {ids}"
    assert flags[0] in (None, "false") and set(flags[1:]) == {"true"}, flags

    if broker.flavor == "artemis":
        # The limit reached, the broker moves the message: the queue empties, the DLQ gains it.
        poll(lambda: node_depth(broker, queue) == 0 and node_depth(broker, "DLQ") == dead_before + 1,
             30, f"{queue} moved to DLQ after {attempts} deliveries",
             explain=lambda: f"depths {broker.depths(queue)}, DLQ {broker.depths('DLQ')} "
                             f"(before: {dead_before} on node {NODE})")
        dead = take_dead_letter(broker, queue)
        assert [d.headers.get("loadgen_id") for d in dead] == ["0"], [d.headers for d in dead]
        assert dead[0].body == frames[0].body
    else:
        # Past Artemis's limit Classic still holds it on the queue and dead-letters nothing.
        assert node_depth(broker, queue) == 1, broker.depths(queue)
        assert node_depth(broker, "ActiveMQ.DLQ") == dead_before, broker.depths("ActiveMQ.DLQ")
        last = deliver(broker, queue, attempts, ack="auto")  # and consume it at last
        assert last.headers["loadgen_id"] == "0" and last.headers.get("redelivered") == "true"
        poll(lambda: node_depth(broker, queue) == 0, 30, f"{queue} empty after an auto-ack delivery",
             explain=lambda: f"depths {broker.depths(queue)}")
