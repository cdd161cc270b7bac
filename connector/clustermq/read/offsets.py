"""Offsets: per-node delivery counters, serialised as JSON with a fixed key order.

Spark compares a source's offsets as JSON strings (to decide whether there is new data), so two
equal offsets must serialise identically: keys are always sorted by node name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from clustermq.errors import CheckpointError

NodeOffsets = dict[str, int]


def make_offsets(values: Mapping[str, int], node_names: Iterable[str]) -> NodeOffsets:
    """Offsets for exactly ``node_names`` (missing ones start at 0), keys sorted."""
    return {name: int(values.get(name, 0)) for name in sorted(node_names)}


def parse_offsets(offset: Mapping[str, object] | None, node_names: Iterable[str]) -> NodeOffsets:
    """Read an offset dict from Spark; a node new to the checkpoint starts at 0.

    Nodes in the checkpoint but no longer in ``brokers`` are dropped: their unacknowledged
    messages were given back to the broker when the old run's connections closed.
    """
    values: dict[str, int] = {}
    for name, value in (offset or {}).items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise CheckpointError(f"corrupt clustermq offset for node '{name}' in the checkpoint: "
                                  f"{value!r} (expected a count >= 0); the checkpoint was damaged "
                                  "or written by another source: start the query with a new "
                                  "checkpointLocation")
        values[name] = value
    return make_offsets(values, node_names)


def allocate(
    available: Sequence[Sequence[int]],
    max_messages: int | None,
    max_bytes: int | None,
) -> list[int]:
    """How many messages to take from each node for one batch.

    ``available[i]`` lists the body sizes of node i's next messages, in delivery order.
    Messages are taken one per node in turn, so the limits are shared fairly between nodes
    and no node starves. At least one message is taken when any is available, even if it is
    bigger than ``max_bytes``, or a single large message would stall the stream forever.
    """
    counts = [0] * len(available)
    taken = 0
    size = 0
    progressed = True
    while progressed:
        progressed = False
        for i, sizes in enumerate(available):
            if counts[i] >= len(sizes):
                continue
            if max_messages is not None and taken >= max_messages:
                return counts
            nxt = sizes[counts[i]]
            if max_bytes is not None and taken > 0 and size + nxt > max_bytes:
                return counts
            counts[i] += 1
            taken += 1
            size += nxt
            progressed = True
    return counts
