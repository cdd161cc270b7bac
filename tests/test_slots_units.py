"""Group slots (read/slots.py, read/stomp_link.py) without a broker: which brokers get them,
ACKs, placement."""

from __future__ import annotations

from types import SimpleNamespace

from clustermq.broker.dialect import ArtemisDialect, ClassicDialect
from clustermq.broker.nodes import Node
from clustermq.broker.session import NodeSession
from clustermq.options import ReadOptions
from clustermq.read.messages import BufferedMessage
from clustermq.read.slots import (
    bucket_for_slot,
    last_per_slot,
    queue_link_id,
    slot_count,
    slot_ids,
    slot_prefetch,
)
from clustermq.read.stomp_link import Receiver, StompLink


def delivery(seq: int, slot: int | None, destination: str = "/queue/q") -> BufferedMessage:
    return BufferedMessage(headers={"destination": destination}, body=b"", ack_id=f"a{seq}", generation=1,
                           arrival=seq, seq=seq, slot=slot)


def test_only_a_broker_that_hides_groups_gets_several_slots() -> None:
    assert slot_count(ClassicDialect(), 4) == 4
    assert slot_count(ArtemisDialect(), 4) == 1
    # one subscription keeps the reader's old id and has no slot: its rows are spread as before
    assert slot_ids(2, 1) == {"clustermq-2": None}
    assert slot_ids(2, 3) == {"clustermq-2-0": 0, "clustermq-2-1": 1, "clustermq-2-2": 2}


def test_a_single_queue_keeps_the_link_id_the_reader_always_used() -> None:
    assert queue_link_id("clustermq-2-1", 0, 1) == "clustermq-2-1"
    assert [queue_link_id("clustermq-2", j, 3) for j in range(3)] == [
        "clustermq-2-q0", "clustermq-2-q1", "clustermq-2-q2"]


def test_the_slots_share_the_node_prefetch() -> None:
    assert [slot_prefetch(1000, 3, k) for k in range(3)] == [334, 333, 333]
    assert [slot_prefetch(500, 3, k) for k in range(3)] == [167, 167, 166]
    assert [slot_prefetch(2, 3, k) for k in range(3)] == [1, 1, 1]
    assert slot_prefetch(10, 1, None) == 10


def test_a_client_ack_is_sent_for_the_last_delivery_of_every_slot() -> None:
    """A ``client`` ACK is cumulative per subscription: one per slot, none skipped."""
    batch = [delivery(0, 0), delivery(1, 1), delivery(2, 0), delivery(3, 2), delivery(4, 1)]
    assert [m.seq for m in last_per_slot(batch)] == [2, 3, 4]
    assert [m.seq for m in last_per_slot([delivery(0, None), delivery(1, None)])] == [1]


def test_a_client_ack_is_sent_for_the_last_delivery_of_every_slot_of_every_queue() -> None:
    """With several queues a node has a subscription per slot and queue; the ``destination``
    header tells them apart, so the last of each is acknowledged."""
    a, b = "/queue/a", "/queue/b"
    batch = [delivery(0, 0, a), delivery(1, 0, b), delivery(2, 1, a), delivery(3, 0, a), delivery(4, 1, b)]
    assert [m.seq for m in last_per_slot(batch)] == [1, 2, 3, 4]
    assert [m.seq for m in last_per_slot([delivery(0, None, a), delivery(1, None, b),
                                          delivery(2, None, a)])] == [1, 2]


def test_a_slot_maps_to_one_partition_and_nodes_are_shifted() -> None:
    for node in range(3):
        assert sorted(bucket_for_slot(slot, node, 3) for slot in range(3)) == [0, 1, 2]
    assert bucket_for_slot(0, 0, 3) != bucket_for_slot(0, 1, 3)


class _Owner:
    """Stands in for the node subscription a link delivers to (read/links.py)."""

    def __init__(self) -> None:
        self.node, self.index = Node("h", 1), 0
        self.options = ReadOptions.parse({"brokers": "h:1", "queue": "q"})
        self.delivered: list[tuple[str, int | None]] = []

    def deliver(self, headers: dict[str, str], body: bytes, ack_id: str | None, generation: int,
                slot: int | None = None) -> None:
        self.delivered.append((headers["message-id"], slot))


class _Conn:
    def __init__(self) -> None:
        self.acked: list[str] = []

    def ack(self, ack_id: str) -> None:
        self.acked.append(ack_id)


def test_the_stomp_link_delivers_each_frame_with_its_slot_and_acks_per_slot() -> None:
    """A frame's ``subscription`` header names its slot; a ``client`` ACK goes to the last
    delivery of each slot, a ``client-individual`` one to every delivery."""
    owner = _Owner()
    receiver = Receiver(owner, generation=1)  # type: ignore[arg-type]
    receiver.slots = slot_ids(0, 2)
    for mid, sub in [("m0", "clustermq-0-1"), ("m1", "clustermq-0-0"), ("m2", "clustermq-0-9")]:
        receiver.on_message(SimpleNamespace(headers={"message-id": mid, "subscription": sub, "ack": mid},
                                            body=b"x"))
    assert owner.delivered == [("m0", 1), ("m1", 0), ("m2", None)]

    batch = [delivery(0, 0), delivery(1, 1), delivery(2, 0)]
    for mode, expected in [("client", ["a1", "a2"]), ("client-individual", ["a0", "a1", "a2"])]:
        conn = _Conn()
        StompLink(NodeSession(owner.node, conn, ClassicDialect(), {}), mode).ack(batch)  # type: ignore[arg-type]
        assert conn.acked == expected
