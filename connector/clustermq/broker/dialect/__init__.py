"""Broker dialects: every difference between ActiveMQ Classic and Artemis lives here.

The rest of the connector asks its dialect object and never tests the flavour itself. A
dialect comes from the ``flavor`` option (:func:`resolve_dialect`) or, with ``flavor=auto``,
from the CONNECTED frame's ``server`` header (:func:`detect_dialect`).
"""

from __future__ import annotations

from clustermq.broker.dialect.amqp_dialects import ArtemisAmqpDialect, ClassicAmqpDialect
from clustermq.broker.dialect.artemis_dialect import ArtemisDialect
from clustermq.broker.dialect.base import BrokerDialect
from clustermq.broker.dialect.classic_dialect import ClassicDialect
from clustermq.errors import OptionError

#: every dialect by the ``flavor`` option's value for it
DIALECTS: dict[str, BrokerDialect] = {"classic": ClassicDialect(), "artemis": ArtemisDialect()}
#: the same brokers read over AMQP 1.0 (the reader's ``transport=amqp``), by flavor
AMQP_DIALECTS: dict[str, BrokerDialect] = {"classic": ClassicAmqpDialect(), "artemis": ArtemisAmqpDialect()}


def detect_dialect(server_header: str | None) -> BrokerDialect:
    """Pick the dialect from the CONNECTED frame's ``server`` header."""
    server = (server_header or "").lower()
    if "artemis" in server:
        return DIALECTS["artemis"]
    if server.startswith("activemq"):
        return DIALECTS["classic"]
    raise OptionError(
        f"option 'flavor': cannot tell the broker kind from server header '{server_header}'; "
        "set flavor to classic or artemis"
    )


def configured_dialect(flavor: str) -> BrokerDialect | None:
    """The dialect the ``flavor`` option names; ``None`` for ``auto`` (known only once connected)."""
    return None if flavor == "auto" else DIALECTS[flavor]


def resolve_dialect(flavor: str, server_header: str | None) -> BrokerDialect:
    """The dialect for option ``flavor`` (``auto`` reads the server header)."""
    return configured_dialect(flavor) or detect_dialect(server_header)


def resolve_amqp_dialect(flavor: str, product: str | None) -> BrokerDialect:
    """The AMQP dialect for option ``flavor`` (``auto`` reads the AMQP open's ``product``)."""
    return AMQP_DIALECTS[resolve_dialect(flavor, product).name]


__all__ = [
    "AMQP_DIALECTS",
    "DIALECTS",
    "ArtemisDialect",
    "BrokerDialect",
    "ClassicDialect",
    "configured_dialect",
    "detect_dialect",
    "resolve_amqp_dialect",
    "resolve_dialect",
]
