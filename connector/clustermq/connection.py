"""Opening one STOMP 1.2 connection to one node, with a bounded wait and a clear error.

stomp.py's own ``connect(wait=True)`` can wait forever and retries hosts itself; the connector
keeps its own node list and back-off, so here a connection is one attempt with a deadline.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from typing import Any

import stomp
from stomp.exception import StompException

from .nodes import Node
from .options import ConnectionOptions

log = logging.getLogger("clustermq.connection")

HEARTBEAT_RECEIVE_SCALE = 2.5


class NodeUnavailable(ConnectionError):
    """A node could not be reached or refused the login; the message names the node."""

    def __init__(self, node: Node, reason: str) -> None:
        super().__init__(f"broker node {node.name}: {reason}")
        self.node = node
        self.reason = reason


class _ConnectWaiter(stomp.ConnectionListener):
    """Turns stomp.py's callbacks into one event with the outcome of the CONNECT."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.connected_headers: dict[str, str] = {}
        self.error: str | None = None

    def on_connected(self, frame: Any) -> None:
        self.connected_headers = dict(frame.headers)
        self.done.set()

    def on_error(self, frame: Any) -> None:
        if not self.done.is_set():
            message = frame.headers.get("message", "")
            body = frame.body.decode("utf-8", "replace") if isinstance(frame.body, bytes) else str(frame.body)
            self.error = (message or body.strip().splitlines()[0] if body.strip() else "ERROR frame")
            self.done.set()

    def on_disconnected(self) -> None:
        if not self.done.is_set():
            self.error = self.error or "connection closed during login"
            self.done.set()


def open_connection(
    node: Node,
    options: ConnectionOptions,
    listener: stomp.ConnectionListener | None = None,
    listener_name: str = "clustermq",
) -> tuple[stomp.Connection12, dict[str, str]]:
    """Connect and log in to ``node``; return the connection and the CONNECTED headers.

    Bodies stay bytes (``auto_decode=False``): message bodies are binary in the schema.
    """
    heartbeat = options.heartbeat_ms
    # ActiveMQ Classic writes a keep-alive only when it wrote nothing during the last whole
    # interval, so gaps of up to twice the interval are normal; stomp.py's default of 1.5x
    # declared healthy nodes dead under load (measured), hence 2.5x.
    conn = stomp.Connection12(
        [(node.host, node.port)],
        reconnect_attempts_max=1,
        heartbeats=(heartbeat, heartbeat),
        heart_beat_receive_scale=HEARTBEAT_RECEIVE_SCALE,
        timeout=options.connect_timeout_s,
        auto_decode=False,
        prefer_localhost=False,
        try_loopback_connect=False,
    )
    if node.ssl:
        conn.set_ssl([(node.host, node.port)], ssl_version=ssl.PROTOCOL_TLS_CLIENT)
    waiter = _ConnectWaiter()
    conn.set_listener("clustermq-connect", waiter)
    if listener is not None:
        conn.set_listener(listener_name, listener)
    username, password = options.login
    try:
        conn.connect(username=username, passcode=password, wait=False)
    except (StompException, OSError) as exc:
        _quiet_disconnect(conn)
        raise NodeUnavailable(node, f"cannot connect ({type(exc).__name__})") from None
    if not waiter.done.wait(options.connect_timeout_s):
        _quiet_disconnect(conn)
        raise NodeUnavailable(
            node, f"no CONNECTED frame within {options.connect_timeout_s:.1f} s"
        )
    if waiter.error is not None or not conn.is_connected():
        _quiet_disconnect(conn)
        reason = waiter.error or "connection refused"
        if password:
            reason = reason.replace(password, "***")
        raise NodeUnavailable(node, f"login failed: {reason}")
    conn.remove_listener("clustermq-connect")
    return conn, waiter.connected_headers


def _quiet_disconnect(conn: stomp.Connection12, grace_s: float = 2.0) -> None:
    """DISCONNECT politely, then close the socket after ``grace_s`` whatever happened.

    stomp.py's ``transport.stop()`` waits for the DISCONNECT receipt with no deadline, which
    hangs forever on a node that stalls with its socket open.
    """
    try:
        if conn.is_connected():
            conn.disconnect()
            deadline = time.monotonic() + grace_s
            while conn.is_connected() and time.monotonic() < deadline:
                time.sleep(0.02)
    except Exception:  # noqa: BLE001 - best effort on a broken connection
        pass
    try:
        conn.transport.disconnect_socket()
    except Exception:  # noqa: BLE001
        pass


def close_connection(conn: stomp.Connection12 | None) -> None:
    """Close without acknowledging: unacknowledged messages go back to the broker."""
    if conn is not None:
        _quiet_disconnect(conn)
