"""Broker dialects: every difference between ActiveMQ Classic and Artemis lives here.

The rest of the connector asks its dialect object and never tests the flavour itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


class BrokerDialect:
    """What the connector needs to know about one kind of broker."""

    name: str = "abstract"
    #: header in which the broker itself returns a message's group to STOMP consumers
    group_header: str | None = None
    #: whether STOMP can browse a queue without consuming it
    can_browse: bool = False

    def destination(self, queue: str) -> str:
        return f"/queue/{queue}"

    def routing_headers(self) -> dict[str, str]:
        """Headers every SEND and SUBSCRIBE to a queue needs."""
        return {}

    def subscribe_headers(self, prefetch: int, window_bytes: int) -> dict[str, str]:
        """Flow control: how many messages (or bytes) may be delivered ahead of acks."""
        return dict(self.routing_headers())

    def group_id(self, headers: Mapping[str, str], fallback_header: str) -> str | None:
        """The message's group id: the broker's own header first, then ``fallback_header``."""
        if self.group_header:
            value = headers.get(self.group_header)
            if value:
                return value
        value = headers.get("JMSXGroupID") or headers.get(fallback_header)
        return value or None

    def send_headers(self, group_id: str | None, fallback_header: str) -> dict[str, str]:
        """Group headers for a SEND: broker-side grouping plus the header the reader reads."""
        headers = dict(self.routing_headers())
        if group_id is not None:
            headers["JMSXGroupID"] = group_id
            headers[fallback_header] = group_id
        return headers

    def duplicate_id_headers(self, message_key: str) -> dict[str, str]:
        """Headers that let the broker itself drop a duplicate SEND (Artemis only)."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@dataclass(frozen=True, repr=False)
class ClassicDialect(BrokerDialect):
    """ActiveMQ Classic 5.x: prefetch counts messages; JMSXGroupID is not returned on STOMP."""

    name: str = "classic"
    can_browse: bool = True

    def subscribe_headers(self, prefetch: int, window_bytes: int) -> dict[str, str]:
        return {"activemq.prefetchSize": str(prefetch)}


@dataclass(frozen=True, repr=False)
class ArtemisDialect(BrokerDialect):
    """ActiveMQ Artemis 2.x: flow control in bytes, groups in ``_AMQ_GROUP_ID``, no browse."""

    name: str = "artemis"
    group_header: str | None = "_AMQ_GROUP_ID"
    can_browse: bool = False

    def destination(self, queue: str) -> str:
        return queue

    def routing_headers(self) -> dict[str, str]:
        return {"destination-type": "ANYCAST"}

    def subscribe_headers(self, prefetch: int, window_bytes: int) -> dict[str, str]:
        headers = dict(self.routing_headers())
        headers["consumer-window-size"] = str(window_bytes)
        return headers

    def duplicate_id_headers(self, message_key: str) -> dict[str, str]:
        return {"_AMQ_DUPL_ID": message_key}


DIALECTS: dict[str, BrokerDialect] = {"classic": ClassicDialect(), "artemis": ArtemisDialect()}


def detect_dialect(server_header: str | None) -> BrokerDialect:
    """Pick the dialect from the CONNECTED frame's ``server`` header."""
    server = (server_header or "").lower()
    if "artemis" in server:
        return DIALECTS["artemis"]
    if server.startswith("activemq"):
        return DIALECTS["classic"]
    raise ValueError(
        f"option 'flavor': cannot tell the broker kind from server header '{server_header}'; "
        "set flavor to classic or artemis"
    )


def resolve_dialect(flavor: str, server_header: str | None) -> BrokerDialect:
    """The dialect for option ``flavor`` (``auto`` reads the server header)."""
    if flavor == "auto":
        return detect_dialect(server_header)
    return DIALECTS[flavor]
