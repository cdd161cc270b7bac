"""Group slots (read/slots.py) without a broker: which brokers get them, ACKs, placement."""

from __future__ import annotations

from clustermq.broker.dialect import ArtemisDialect, ClassicDialect
from clustermq.read.messages import BufferedMessage
from clustermq.read.slots import bucket_for_slot, last_per_slot, slot_count, slot_ids, slot_prefetch


def delivery(seq: int, slot: int | None) -> BufferedMessage:
    return BufferedMessage(headers={}, body=b"", ack_id=f"a{seq}", generation=1, arrival=seq,
                           seq=seq, slot=slot)


def test_only_a_broker_that_hides_groups_gets_several_slots() -> None:
    assert slot_count(ClassicDialect(), 4) == 4
    assert slot_count(ArtemisDialect(), 4) == 1
    # one subscription keeps the reader's old id and has no slot: its rows are spread as before
    assert slot_ids(2, 1) == {"clustermq-2": None}
    assert slot_ids(2, 3) == {"clustermq-2-0": 0, "clustermq-2-1": 1, "clustermq-2-2": 2}


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


def test_a_slot_maps_to_one_partition_and_nodes_are_shifted() -> None:
    for node in range(3):
        assert sorted(bucket_for_slot(slot, node, 3) for slot in range(3)) == [0, 1, 2]
    assert bucket_for_slot(0, 0, 3) != bucket_for_slot(0, 1, 3)
