"""What the reader keeps per delivered message and reports per node.

Shared by the streaming reader (``subscription``, ``consumer``), the browse and the schema, so
none of them has to import another for a record type.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class BufferedMessage:
    """One delivered message: the sender's headers, the body, and where it stands in the stream.

    ``ack_id`` acknowledges it on the connection of ``generation`` only; ``arrival`` is its
    number among all deliveries to this process, ``seq`` its offset on its node (-1 until
    numbered); ``slot`` the node's subscription it came on where the node has several
    (read/slots.py), else ``None``; ``copy`` whether this process had already received a
    delivery of the same message (read/copies.py), which flags the row ``redelivered``.
    """

    headers: dict[str, str]
    body: bytes
    ack_id: str | None
    generation: int
    arrival: int
    seq: int = -1
    slot: int | None = None
    copy: bool = False

    @property
    def size(self) -> int:
        return len(self.body)


@dataclass
class NodeStatus:
    """One node's subscription at a glance, for progress reports and errors."""

    node: str
    connected: bool
    buffered: int
    next_seq: int | None
    acked_upto: int | None
    reconnects: int
    last_error: str | None = field(default=None)
    departed: bool = False  # the cluster no longer lists it: not reconnecting (membership.py)
    #: a priority backup not read while a preferred node is connected (priority.py)
    paused: bool = False
