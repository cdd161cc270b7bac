"""What a node's subscription needs from its connection, whatever the ``transport`` option says.

``stomp`` (stomp_link.py, the default) and ``amqp`` (amqp_link.py, opt-in: it shows a JMS
group's name on Classic and the JMS message id on Artemis, at several times the CPU per
message) implement the same :class:`Link`; the subscription above them numbers, buffers,
reconnects and decides when to acknowledge, the same for both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from clustermq.broker.dialect import BrokerDialect
from clustermq.read.messages import BufferedMessage

if TYPE_CHECKING:
    from clustermq.read.subscription import NodeSubscription


class Link(Protocol):
    """One connection of a subscription; it reports deliveries and its loss to the subscription."""

    @property
    def dialect(self) -> BrokerDialect:
        """The broker's dialect as this link reads it (known once connected)."""

    def ack(self, messages: list[BufferedMessage]) -> None:
        """Acknowledge ``messages`` (all delivered on this link); raises when it cannot."""

    def close(self) -> None:
        """Close without acknowledging: the broker takes back what is unacknowledged."""


def open_link(sub: NodeSubscription, generation: int) -> Link:
    """Connect ``sub``'s node over its ``transport``; raises :class:`~clustermq.errors.NodeUnavailable`."""
    if sub.options.transport == "amqp":
        from clustermq.read.amqp_link import open_amqp_link  # proton only where it is asked for

        return open_amqp_link(sub, generation)
    from clustermq.read.stomp_link import open_stomp_link

    return open_stomp_link(sub, generation)
