"""How an AMQP 1.0 receiver of the queue connects and what it asks for at attach: the login,
the source's address and capabilities, the JMS selector filter, and for a browse the ``copy``
distribution mode.

The streaming link (read/amqp_link.py) and the browse (read/amqp_browse.py) connect and attach
alike, so both ask here; the dialect says the address and capabilities (Artemis consumes the
anycast queue of that name only with the ``queue`` capability), the connection's first frames
say the dialect (:func:`connection_dialect`).
"""

from __future__ import annotations

from typing import Any

from proton import Data, Link, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container, Copy, ReceiverOption, Selector

from clustermq.broker.connection_options import ConnectionOptions
from clustermq.broker.dialect import BrokerDialect, resolve_amqp_dialect
from clustermq.broker.nodes import Node

#: the link sees no messages more often than this scale of ``heartbeat`` (as STOMP's 2.5 x)
IDLE_SCALE = 2.5


def connect(container: Container, endpoint: Node, options: ConnectionOptions) -> Any:
    """Open a connection to ``endpoint`` with the cluster's login (SASL PLAIN, plain TCP) and
    ``heartbeat``; no reconnect: a lost connection is the caller's to handle."""
    user, password = options.login
    heartbeat_s = options.heartbeat_ms / 1000 * IDLE_SCALE or None
    return container.connect(
        f"amqp://{endpoint.host}:{endpoint.port}", user=user, password=password,
        reconnect=False, heartbeat=heartbeat_s, allow_insecure_mechs=True,
        allowed_mechs="PLAIN" if user else "ANONYMOUS", sasl_enabled=True)


def connection_dialect(connection: Any, flavor: str) -> BrokerDialect:
    """The dialect of an opened connection (its ``product`` property); ``ValueError`` when it
    cannot be told or contradicts ``flavor``."""
    props = connection.remote_properties or {}
    return resolve_amqp_dialect(flavor, str(props.get(symbol("product"), "")))


class SourceCapabilities(ReceiverOption):
    """The source's capabilities (``queue``)."""

    def __init__(self, capabilities: tuple[str, ...]) -> None:
        self.capabilities = capabilities

    def apply(self, link: Link) -> None:
        if self.capabilities:
            link.source.capabilities.put_array(False, Data.SYMBOL)
            link.source.capabilities.enter()
            for capability in self.capabilities:
                link.source.capabilities.put_symbol(symbol(capability))
            link.source.capabilities.exit()


def queue_source(dialect: BrokerDialect, queue: str, selector: str | None,
                 browse: bool = False) -> tuple[str, list[ReceiverOption]]:
    """The address of ``queue`` and the receiver options: its capabilities, the selector filter
    (``apache.org:selector-filter:string``, which both brokers apply) when there is one, and with
    ``browse`` the ``copy`` distribution mode, in which the broker sends copies and the queue
    keeps its messages (a queue browser)."""
    address, capabilities = dialect.amqp_source(queue)
    options: list[ReceiverOption] = [SourceCapabilities(capabilities)]
    if selector:
        options.append(Selector(selector))
    if browse:
        options.append(Copy())
    return address, options


class FailingReceiver(MessagingHandler):
    """A receiver's handler whose connection or link failing is one call, ``_fail(reason)``:
    the streaming link and the browse word the broker's reasons alike."""

    def _fail(self, reason: str) -> None:
        raise NotImplementedError

    def on_link_error(self, event: Any) -> None:
        self._fail(f"link refused: {_condition(event.link.remote_condition)}")

    def on_connection_error(self, event: Any) -> None:
        self._fail(f"connection refused: {_condition(event.connection.remote_condition)}")

    def on_transport_error(self, event: Any) -> None:
        self._fail(f"connection lost: {_condition(event.transport.condition)}")

    def on_disconnected(self, event: Any) -> None:
        self._fail("connection lost")


def _condition(condition: Any) -> str:
    if condition is None:
        return "no reason given"
    return f"{condition.name}: {condition.description}" if condition.description else str(condition.name)
