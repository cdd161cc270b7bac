"""Group slots: several subscriptions per node, so a group the broker hides stays together.

ActiveMQ Classic does not return JMSXGroupID to STOMP consumers, yet it pins every group to one
consumer of the node (docs/broker-behaviour.md, "JMS groups over STOMP"). Where the dialect says
so (``hides_jms_group``), the reader opens ``numPartitions`` subscriptions ("slots") on the
node's one connection and buckets a row whose group it cannot see by the slot it arrived on:
every message of such a group read from a node lands in one Spark partition, in the broker's
order, for as long as the connection lasts. A row whose group it can see keeps the hash of the
name (``groups.bucket_for_group``).

One connection keeps what the rest of the reader relies on: one delivery counter per node, one
loss and one reconnect per node. Only acknowledgement differs: a ``client`` ACK is cumulative
per subscription, so a batch needs one ACK per slot (:func:`last_per_slot`).
"""

from __future__ import annotations

from collections.abc import Iterable

from clustermq.broker.dialect import BrokerDialect
from clustermq.read.messages import BufferedMessage


def slot_count(dialect: BrokerDialect, num_partitions: int) -> int:
    """Subscriptions per node: one per Spark partition where the broker hides groups, else 1."""
    return max(1, num_partitions) if dialect.hides_jms_group else 1


def slot_ids(node_index: int, slots: int) -> dict[str, int | None]:
    """STOMP subscription id -> slot. A single subscription keeps the id the reader always
    used and has no slot (its rows without a group are spread, ``groups.bucket_for_ungrouped``)."""
    if slots == 1:
        return {f"clustermq-{node_index}": None}
    return {f"clustermq-{node_index}-{slot}": slot for slot in range(slots)}


def queue_link_id(base: str, queue_index: int, queues: int) -> str:
    """The id of a subscription (or AMQP receiver) ``base`` for the queue at ``queue_index`` of
    option ``queue``: a single queue keeps ``base``, the id the reader always used."""
    return base if queues == 1 else f"{base}-q{queue_index}"


def slot_prefetch(prefetch: int, slots: int, slot: int | None) -> int:
    """Slot ``slot``'s share of ``prefetchPerNode``: the shares add up to the option (at least
    1 each), so the reader's memory bound and its per-node window stay what they were.

    A group is pinned to one slot, so one group alone has only its slot's share in flight."""
    if slot is None or slots <= 1:
        return prefetch
    return max(1, prefetch // slots + (1 if slot < prefetch % slots else 0))


def bucket_for_slot(slot: int, node_index: int, buckets: int) -> int:
    """The Spark partition of rows that arrived on ``slot`` of a node and show no group.

    Shifted by the node so that slot 0 of every node does not fill the same partition."""
    return (slot + node_index) % buckets


def last_per_slot(messages: Iterable[BufferedMessage]) -> list[BufferedMessage]:
    """The last message of each subscription, in delivery order: one cumulative ACK each.

    A node has a subscription per slot and queue (several with a list of queues), and a
    message's ``destination`` header names its queue."""
    last: dict[tuple[int | None, str | None], BufferedMessage] = {}
    for message in messages:
        last[(message.slot, message.headers.get("destination"))] = message
    return sorted(last.values(), key=lambda m: m.seq)
