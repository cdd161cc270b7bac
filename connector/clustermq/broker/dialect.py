"""Broker dialects: every difference between ActiveMQ Classic and Artemis lives here.

The rest of the connector asks its dialect object and never tests the flavour itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_OUTSIDE_BMP = re.compile("[\U00010000-\U0010FFFF]")


class BrokerDialect:
    """What the connector needs to know about one kind of broker."""

    name: str = "abstract"
    #: header in which the broker itself returns a message's group to STOMP consumers
    group_header: str | None = None
    #: whether STOMP can browse a queue without consuming it
    can_browse: bool = False
    #: whether an ACK inside a STOMP transaction is undone by ABORT (else it takes effect at once)
    transactional_ack: bool = True

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

    def message_id(self, headers: Mapping[str, str], node: str) -> str | None:
        """The message's id: unique in the cluster, stable across redeliveries by ``node``."""
        return headers.get("message-id")

    def header_value_problem(self, headers: Mapping[str, str]) -> str | None:
        """Why the broker would not deliver one of these header values intact, or ``None``."""
        return None

    def check_browse(self) -> None:
        """Raise a clear error where STOMP cannot browse (read without consuming)."""
        if not self.can_browse:
            raise ValueError(
                f"{self.name}: this broker cannot browse a queue over STOMP (read without "
                "consuming); read it with a draining query instead (readStream, "
                "Trigger.AvailableNow), which consumes and acknowledges on commit"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@dataclass(frozen=True, repr=False)
class ClassicDialect(BrokerDialect):
    """ActiveMQ Classic 5.x: prefetch counts messages; JMSXGroupID is not returned on STOMP."""

    name: str = "classic"
    can_browse: bool = True

    def subscribe_headers(self, prefetch: int, window_bytes: int) -> dict[str, str]:
        return {"activemq.prefetchSize": str(prefetch)}

    def header_value_problem(self, headers: Mapping[str, str]) -> str | None:
        """Characters outside the BMP: a network bridge turns each into two U+FFFD.

        Measured on 5.18.3 with raw STOMP frames: delivered intact by the node they were sent
        to, replaced when the message crossed a bridge to a consumer on another node; bodies
        were intact either way. Upstream: AMQ-8398 (STOMP/OpenWire conversion of 4-byte UTF-8).
        A message cannot be kept off the bridges, so the writer refuses it instead of letting
        the value change on the way.
        """
        for name, value in headers.items():
            if value.isascii():
                continue
            found = _OUTSIDE_BMP.search(value)
            if found:
                return (f"header '{name}' has a character outside the Basic Multilingual Plane "
                        f"(U+{ord(found.group()):04X}); ActiveMQ Classic replaces each such "
                        "character with two U+FFFD when the message crosses a network bridge "
                        "(AMQ-8398): put such text in the body, which arrives intact")
        return None


@dataclass(frozen=True, repr=False)
class ArtemisDialect(BrokerDialect):
    """ActiveMQ Artemis 2.x: flow control in bytes, groups in ``_AMQ_GROUP_ID``, no browse.

    Measured on Artemis 2.40.0 over STOMP 1.2 (see docs/design.md, "Artemis facts"):

    * Destinations are bare queue names with ``destination-type:ANYCAST`` on SEND and SUBSCRIBE.
      That works whatever prefixes the cluster's STOMP acceptor has (``/queue/x`` is anycast
      only with ``anycastPrefix=/queue/``, else it is a multicast address literally named
      ``/queue/x``) and it is the address a JMS or core client uses for queue ``x``.
    * ``consumer-window-size`` counts bytes of un-acknowledged deliveries (the body plus about
      270 bytes of headers for a 200-byte message with a few headers); the default is 10 KiB.
    * A SEND's ``JMSXGroupID`` becomes the group and comes back as ``_AMQ_GROUP_ID``.
    * ``_AMQ_DUPL_ID`` on a SEND makes the broker drop a later SEND with the same value.
    * ``message-id`` (and ``ack``) is ``<consumer id>,<message id>``: only the second part
      stays the same when the message is redelivered on another connection, and it is unique
      only within one node (every node numbers its own journal), hence ``<message id>@<node>``.
    * An ACK inside a transaction is applied at once (the broker logs AMQ222070 "Stomp
      Transactional acknowledgement is not supported"); ABORT does not undo it.
    """

    name: str = "artemis"
    group_header: str | None = "_AMQ_GROUP_ID"
    can_browse: bool = False
    transactional_ack: bool = False

    def destination(self, queue: str) -> str:
        return queue[len("/queue/"):] if queue.startswith("/queue/") else queue

    def routing_headers(self) -> dict[str, str]:
        return {"destination-type": "ANYCAST"}

    def subscribe_headers(self, prefetch: int, window_bytes: int) -> dict[str, str]:
        headers = dict(self.routing_headers())
        headers["consumer-window-size"] = str(window_bytes)
        return headers

    def duplicate_id_headers(self, message_key: str) -> dict[str, str]:
        return {"_AMQ_DUPL_ID": message_key}

    def message_id(self, headers: Mapping[str, str], node: str) -> str | None:
        """``<message id>@<node>``: the message id is only unique within one node's journal."""
        value = headers.get("message-id")
        if not value:
            return None
        return f"{value.rsplit(',', 1)[-1]}@{node}"


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
