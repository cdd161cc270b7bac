"""Request and reply over STOMP, all within one deadline: how the depth probe asks a node.

Each broker answers management questions differently (see the dialects' ``queue_depth``), but
always the same way over STOMP: subscribe a reply destination, confirmed by a RECEIPT so no
reply can be routed before the subscription exists; send the request; wait for the reply.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import stomp

from clustermq.broker.listener import Inbox
from clustermq.errors import DepthError, LinkLost


class Requester:
    """One node's connection for request/reply, and the deadline every wait counts against."""

    def __init__(self, conn: stomp.Connection12, inbox: Inbox, deadline: float,
                 keep_reply: bool = False) -> None:
        self.conn = conn
        self.inbox = inbox
        self.deadline = deadline
        #: ``keep_reply``: one reply subscription serves every request of this connection
        #: (they are asked one after another), saving a SUBSCRIBE round trip per request
        self.keep_reply = keep_reply
        #: the kept reply subscription: (destination, subscription id)
        self.reply_address: tuple[str, str] | None = None

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def subscribe(self, destination: str, sub_id: str, headers: Mapping[str, str]) -> None:
        """SUBSCRIBE ``destination`` and wait for the broker's RECEIPT."""

        def send(receipt: str) -> None:
            self.conn.subscribe(destination, id=sub_id, ack="auto", headers={**headers, "receipt": receipt})

        try:
            self.inbox.confirm(send, self.remaining(), "subscribe")
        except LinkLost as exc:
            raise self._failure(exc, "SUBSCRIBE receipt") from None

    def unsubscribe(self, sub_id: str) -> None:
        """End a reply subscription (best effort: the connection closes soon anyway)."""
        try:
            self.conn.unsubscribe(id=sub_id)
        except Exception:
            pass

    def send(self, destination: str, headers: Mapping[str, str]) -> None:
        """Send a request (an empty body; the headers are the question)."""
        self.conn.send(destination, "", headers=dict(headers))

    def send_text(self, destination: str, headers: Mapping[str, str], body: str) -> None:
        """Send a request whose body the broker must read as text: no ``content-length``."""
        auto = self.conn.auto_content_length
        self.conn.auto_content_length = False
        try:
            self.conn.send(destination, body, headers=dict(headers))
        finally:
            self.conn.auto_content_length = auto

    def replies_until_quiet(self, quiet_s: float, accept: Callable[[Any], bool]) -> list[Any]:
        """Every delivery ``accept`` takes until none came for ``quiet_s`` (or the deadline)."""
        frames = []
        while self.remaining() > 0:
            try:
                frame = self.inbox.next(min(quiet_s, self.remaining()))
            except LinkLost as exc:
                raise self._failure(exc, "replies") from None
            if frame is None:
                break
            if accept(frame):
                frames.append(frame)
        return frames

    def reply(self, waiting_for: str, accept: Callable[[Any], bool]) -> Any:
        """The next delivery ``accept`` takes; ``DepthError`` at the deadline or on a loss."""
        while True:
            try:
                frame = self.inbox.next(self.remaining())
            except LinkLost as exc:
                raise self._failure(exc, waiting_for) from None
            if frame is None:
                raise DepthError(f"no {waiting_for} before the timeout")
            if accept(frame):
                return frame

    def _failure(self, exc: LinkLost, waiting_for: str) -> DepthError:
        if self.inbox.error is not None:
            return DepthError(self.inbox.reason)
        if self.inbox.lost.is_set():
            return DepthError(f"connection closed while waiting for {waiting_for}")
        return DepthError(f"no {waiting_for} before the timeout ({exc})")
