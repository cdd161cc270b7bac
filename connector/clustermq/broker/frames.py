"""Reading a received STOMP frame: its body, its ERROR text, and which headers are the sender's.

Connections are opened with ``auto_decode=False`` (message bodies are binary in the schema), so
a body arrives as bytes; a listener someone else registered may still hand over text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Headers of a MESSAGE frame that describe this one delivery on this connection, not the
#: message: the subscription it came on, its ack id, the frame's length, a browse's end marker.
DELIVERY_HEADERS = frozenset({"ack", "subscription", "content-length", "browser"})

#: Headers a message gets when the broker stores it (a copy sent again gets its own), and
#: frame headers of the original SEND that a broker may keep as message properties: Artemis
#: keeps ``transaction``, and forwarded it put a re-sent copy into a long-gone transaction, where
#: the message silently vanished (2.40.0; docs/broker-behaviour.md, "`message-id`, `ack`, and the headers a
#: SEND brings back").
STORED_HEADERS = frozenset({"message-id", "destination", "redelivered", "timestamp", "transaction", "receipt"})


def body_bytes(frame: Any) -> bytes:
    """The frame's body as bytes."""
    body = frame.body
    if isinstance(body, bytes):
        return body
    return str(body if body is not None else "").encode("utf-8")


def body_text(frame: Any) -> str:
    """The frame's body as text (undecodable bytes replaced, never an error)."""
    body = frame.body
    if isinstance(body, bytes):
        return body.decode("utf-8", "replace")
    return str(body if body is not None else "")


def error_text(frame: Any) -> str:
    """What an ERROR frame says: its ``message`` header, else its body's first line."""
    message = frame.headers.get("message", "")
    if message:
        return str(message)
    body = body_text(frame).strip()
    return body.splitlines()[0] if body else "ERROR frame"


def message_headers(
    headers: Mapping[str, str], *, resend: bool = False, drop: Iterable[str] = ()
) -> dict[str, str]:
    """The headers of a delivered message that are the sender's, not the delivery's.

    With ``resend``, also without the headers the broker set when it stored the message: what a
    copy sent again may carry. ``drop`` names further headers to leave out.
    """
    excluded = DELIVERY_HEADERS | STORED_HEADERS if resend else DELIVERY_HEADERS
    extra = frozenset(drop)
    return {k: v for k, v in headers.items() if k not in excluded and k not in extra}
