"""An AMQP 1.0 message as the reader's row sees a STOMP frame: header names and a byte body.

The properties go under the names the STOMP path and the dialects read (``message-id``,
``priority``, ``timestamp`` in ms, ``redelivered``, ``JMSXGroupID``), the application
properties under their own names, as text; so a row looks the same whichever ``transport``
read it, except that over AMQP the group and the JMS message id are always there, and so is
the delivery count (``JMSXDeliveryCount``), which no STOMP frame carries.
"""

from __future__ import annotations

import json
from typing import Any

#: JMS's name for the delivery count, 1 on the first delivery: AMQP's header counts the
#: attempts before this one (``delivery-count``), so it is that plus one
DELIVERY_COUNT_HEADER = "JMSXDeliveryCount"


def message_fields(message: Any, destination: str) -> tuple[dict[str, str], bytes]:
    """``message`` (a ``proton.Message``) as headers and body; ``destination`` as STOMP names it."""
    headers: dict[str, str] = {}
    for key, value in (message.properties or {}).items():
        if value is not None:
            headers[str(key)] = _text(value)
    named = {
        "destination": destination,
        "message-id": message.id,
        "correlation-id": message.correlation_id,
        "reply-to": message.reply_to,
        "subject": message.subject,
        "content-type": message.content_type,
        "JMSXGroupID": message.group_id,
        "JMSXGroupSeq": message.group_sequence if message.group_id else None,
        "priority": message.priority,
        "persistent": "true" if message.durable else "false",
        "timestamp": round(message.creation_time * 1000) if message.creation_time else None,
        "expires": round(message.expiry_time * 1000) if message.expiry_time else None,
        "redelivered": "true" if message.delivery_count else None,
        DELIVERY_COUNT_HEADER: (message.delivery_count or 0) + 1,
    }
    for key, value in named.items():
        if value is not None and value != "":
            headers[key] = _text(value)
    return headers, _body(message.body)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def _body(body: Any) -> bytes:
    """A text body as UTF-8, a binary one byte for byte, a map or list as JSON, none as b""."""
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    return json.dumps(body, default=str).encode("utf-8")
