"""What a node's subscription and its connection need from each other, whatever the ``transport``.

``stomp`` (stomp_link.py, the default) and ``amqp`` (amqp_link.py, opt-in: it shows a JMS
group's name on Classic and the JMS message id on Artemis, at several times the CPU per
message) implement the same :class:`Link`; the subscription above them (the :class:`LinkOwner`)
numbers, buffers, reconnects and decides when to acknowledge, the same for both.
"""

from __future__ import annotations

from typing import Any, Protocol

from clustermq.broker.dialect import BrokerDialect
from clustermq.broker.nodes import Node
from clustermq.options import ReadOptions
from clustermq.read.messages import BufferedMessage


class Link(Protocol):
    """One connection of a subscription; it reports deliveries and its loss to its owner."""

    @property
    def dialect(self) -> BrokerDialect:
        """The broker's dialect as this link reads it (known once connected)."""

    def ack(self, messages: list[BufferedMessage]) -> None:
        """Acknowledge ``messages`` (all delivered on this link); raises when it cannot."""

    def close(self) -> None:
        """Close without acknowledging: the broker takes back what is unacknowledged."""


class LinkOwner(Protocol):
    """The node subscription a link delivers to (read/subscription.py)."""

    node: Node
    index: int
    options: ReadOptions
    dialect: BrokerDialect | None
    _slots: dict[str, int | None]

    def deliver(self, headers: dict[str, str], body: bytes, ack_id: str | None, generation: int,
                slot: int | None = None) -> None: ...

    def _on_message(self, frame: Any, generation: int) -> None: ...

    def _on_lost(self, generation: int, reason: str) -> None: ...

    def _note_error(self, message: str) -> None: ...
