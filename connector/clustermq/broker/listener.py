"""The one base of every STOMP listener in the connector: connection state, ERROR, receipts.

stomp.py calls listeners on its receiver thread. A listener here only records and signals;
frames are sent from the caller's thread, never from the receiver thread (sending from it
deadlocked on a full socket buffer: docs/design.md, "Acknowledgement on commit"). Subclasses that override a
callback call the base's too, so the state below is always kept.
"""

from __future__ import annotations

import queue as queue_mod
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import stomp

from clustermq.broker.frames import error_text
from clustermq.errors import LinkLost

#: how ``StompListener.reason`` starts when the node answered with an ERROR frame
BROKER_ERROR = "broker sent ERROR"


class StompListener(stomp.ConnectionListener):
    """What every use of a connection needs to know about it, kept up to date by stomp.py."""

    def __init__(self) -> None:
        self.connected = threading.Event()
        self.connected_headers: dict[str, str] = {}
        #: set when the connection is unusable: closed, heart-beats missed, or an ERROR frame
        self.lost = threading.Event()
        #: why it is unusable; starts with :data:`BROKER_ERROR` when the broker said so
        self.reason = ""
        #: what the first ERROR frame said (during the login: why it was refused)
        self.error: str | None = None
        self._settled = threading.Event()
        self._receipts: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ stomp.py callbacks
    def on_connected(self, frame: Any) -> None:
        self.connected_headers = dict(frame.headers)
        self.connected.set()
        self._settled.set()

    def on_error(self, frame: Any) -> None:
        text = error_text(frame)
        if self.error is None:
            self.error = text
        self.reason = f"{BROKER_ERROR}: {text}"
        self._set_lost()

    def on_disconnected(self) -> None:
        self.reason = self.reason or "connection closed"
        self._set_lost()

    def on_heartbeat_timeout(self) -> None:
        self.reason = self.reason or "heart-beat timeout"
        self._set_lost()

    def on_receipt(self, frame: Any) -> None:
        with self._lock:
            event = self._receipts.get(frame.headers.get("receipt-id", ""))
        if event is not None:
            event.set()

    def _set_lost(self) -> None:
        self.lost.set()
        self._settled.set()

    # ------------------------------------------------------------------ waiting
    def wait_settled(self, timeout: float) -> bool:
        """Wait until the login ended either way (CONNECTED, ERROR or closed); False on timeout."""
        return self._settled.wait(timeout)

    def wait_receipt(self, receipt_id: str, send: Callable[[], None], timeout: float) -> None:
        """Run ``send`` (a frame carrying ``receipt``) and wait for the RECEIPT or a loss."""
        event = threading.Event()
        with self._lock:
            self._receipts[receipt_id] = event
        try:
            send()
            deadline = time.monotonic() + timeout
            while not event.is_set():
                if self.lost.is_set():
                    raise LinkLost(self.reason or "connection lost before the RECEIPT")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise LinkLost(f"no RECEIPT within {timeout:.0f} s")
                event.wait(min(0.2, remaining))
        finally:
            with self._lock:
                self._receipts.pop(receipt_id, None)

    def confirm(self, send: Callable[[str], None], timeout: float, what: str) -> None:
        """Send a frame with a ``receipt`` and return once the broker confirmed it.

        ``send`` gets the receipt id to put on the frame. Only a RECEIPT proves the broker
        handled the frame (and every frame sent before it on this connection). Raises
        :class:`LinkLost` when the connection is lost, the RECEIPT does not come within
        ``timeout`` s or the frame cannot be sent.
        """
        receipt = f"{what.lower()}-{uuid.uuid4().hex}"
        try:
            self.wait_receipt(receipt, lambda: send(receipt), timeout)
        except LinkLost:
            raise
        except Exception as exc:
            raise LinkLost(f"{what.upper()} failed ({type(exc).__name__})") from None


def commit_with_receipt(conn: stomp.Connection12, listener: StompListener, tx: str, timeout: float) -> None:
    """COMMIT ``tx`` and return only when the broker confirmed it (``LinkLost`` otherwise)."""
    listener.confirm(lambda receipt: conn.commit(tx, headers={"receipt": receipt}), timeout, "commit")


class Inbox(StompListener):
    """Deliveries handed from stomp.py's receiver thread to the one thread that consumes them."""

    def __init__(self) -> None:
        super().__init__()
        # None wakes a waiting reader when the connection is lost
        self._frames: queue_mod.Queue[Any] = queue_mod.Queue()

    def on_message(self, frame: Any) -> None:
        self._frames.put(frame)

    def _set_lost(self) -> None:
        super()._set_lost()
        self._frames.put(None)

    def next(self, timeout: float) -> Any | None:
        """The next delivery, or ``None`` after ``timeout`` s.

        Deliveries that arrived before a loss are still handed out; after them,
        :class:`LinkLost` says why the connection was lost.
        """
        deadline = time.monotonic() + timeout
        while True:
            lost = self.lost.is_set()
            try:
                frame = self._frames.get(block=not lost, timeout=max(0.0, deadline - time.monotonic()))
            except queue_mod.Empty:
                if lost:
                    raise LinkLost(self.reason or "connection lost") from None
                return None
            if frame is not None:
                return frame
