"""stomp.py's callbacks for one connection of a node's subscription (see ``subscription``).

The receiver thread only hands frames over; the subscription does the bookkeeping under its
own lock, and acknowledgements are sent from the caller's thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from clustermq.broker.connection import HEARTBEAT_RECEIVE_SCALE
from clustermq.broker.frames import error_text
from clustermq.broker.listener import StompListener

log = logging.getLogger("clustermq.subscription")


class Receiver(StompListener):
    """One connection (one ``generation``) of a subscription: deliveries, losses and ERRORs.

    Remembers when the node last sent anything, so a loss can be told apart: stomp.py's
    heart-beat thread closes the socket *before* it calls ``on_heartbeat_timeout``, and the
    receiver thread usually reports ``on_disconnected`` first (measured: every stall in the
    network-fault test was reported as "connection lost").
    """

    def __init__(
        self,
        node_name: str,
        generation: int,
        heartbeat_ms: int,
        deliver: Callable[[Any, int], None],
        lose: Callable[[int, str], None],
        note_error: Callable[[str], None],
    ) -> None:
        super().__init__()
        self.node_name = node_name
        self.generation = generation
        self.heartbeat_s = heartbeat_ms / 1000
        self._deliver = deliver
        self._lose = lose
        self._note_error = note_error
        self.last_frame = time.monotonic()

    def _why(self, default: str) -> str:
        silent = time.monotonic() - self.last_frame
        if self.heartbeat_s and silent >= 0.95 * self.heartbeat_s * HEARTBEAT_RECEIVE_SCALE:
            return f"heart-beat timeout: nothing received for {silent:.1f} s"
        return default

    def on_connected(self, frame: Any) -> None:
        self.last_frame = time.monotonic()
        super().on_connected(frame)

    def on_heartbeat(self) -> None:
        self.last_frame = time.monotonic()

    def on_receipt(self, frame: Any) -> None:
        self.last_frame = time.monotonic()
        super().on_receipt(frame)

    def on_message(self, frame: Any) -> None:
        self.last_frame = time.monotonic()
        self._deliver(frame, self.generation)

    def on_disconnected(self) -> None:
        super().on_disconnected()
        self._lose(self.generation, self._why("connection lost"))

    def on_heartbeat_timeout(self) -> None:
        super().on_heartbeat_timeout()
        self._lose(self.generation, self._why("heart-beat timeout"))

    def on_error(self, frame: Any) -> None:
        self.last_frame = time.monotonic()
        super().on_error(frame)
        message = error_text(frame)
        log.error("node %s sent ERROR: %s", self.node_name, message)
        self._note_error(message)
