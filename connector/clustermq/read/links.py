"""What a node's subscription and its connection need from each other, whatever the ``transport``.

``stomp`` (stomp_link.py, the default) and ``amqp`` (amqp_link.py, opt-in: it shows a JMS
group's name on Classic and the JMS message id on Artemis, at several times the CPU per
message) implement the same :class:`Link` and call their owner through the same
:class:`LinkOwner`; the subscription (the owner) numbers, buffers, reconnects and decides when
to acknowledge, the same for both. Wire details (frames, group slots, settlement) stay in the link.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

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

    def close(self, failed: Sequence[BufferedMessage] = ()) -> None:
        """Close without acknowledging: the broker takes back what is unacknowledged.

        ``failed`` were handed to Spark and not acknowledged (the batch of a failed or stopped
        run): where the protocol has an outcome for a delivery that failed, the link settles
        them with it, so that the broker counts the delivery, as it does for a JMS consumer
        that closes with messages it received and did not acknowledge."""


class LinkOwner(Protocol):
    """The node subscription a link delivers to (read/subscription.py).

    A link calls it from its own thread (stomp.py's receiver, proton's reactor); ``generation``
    names the connection, so that what a dropped connection still reports is recognised as late.
    """

    node: Node
    index: int
    options: ReadOptions

    def set_dialect(self, dialect: BrokerDialect) -> None:
        """The node's dialect, told before the first delivery (which may come before the link's
        opener returns)."""

    def deliver(self, headers: dict[str, str], body: bytes, ack_id: str | None, generation: int,
                slot: int | None = None) -> None:
        """One message, with the sender's headers; ``slot`` is its group slot (read/slots.py)."""

    def link_lost(self, generation: int, reason: str) -> None:
        """The connection of ``generation`` is gone: the broker takes back what is unacknowledged."""

    def note_error(self, message: str) -> None:
        """An error the node reported without (yet) closing the connection."""


#: opens a connection of ``generation`` for its owner; raises :class:`~clustermq.errors.NodeUnavailable`
LinkOpener = Callable[[LinkOwner, int], Link]
