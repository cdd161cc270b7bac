"""Opening one STOMP 1.2 connection to one node, with a bounded wait and a clear error.

stomp.py's own ``connect(wait=True)`` can wait forever and retries hosts itself; the connector
keeps its own node list and back-off, so here a connection is one attempt with a deadline. Every
STOMP connection of the connector is opened here: reader, browse, publisher, staging mover,
depth probe, and the development tools' plain clients. A failover group's members are tried
here in order, so every one of those paths reaches whichever member of a pair is live.
"""

from __future__ import annotations

import time

import stomp
from stomp.exception import StompException

from clustermq.broker import fastparse
from clustermq.broker.connection_options import ConnectionOptions
from clustermq.broker.listener import StompListener
from clustermq.broker.nodes import Node
from clustermq.broker.reachability import closed_during_login, connect_failure, group_kind
from clustermq.broker.redaction import register_secret  # importing it installs log redaction
from clustermq.broker.stomp_tls import apply_tls
from clustermq.errors import LOGIN, TIMEOUT, NodeUnavailable

HEARTBEAT_RECEIVE_SCALE = 2.5


def open_connection(
    node: Node,
    options: ConnectionOptions,
    listener: stomp.ConnectionListener | None = None,
    listener_name: str = "clustermq",
    *,
    socket_timeout_s: float | None = None,
    client_id: str | None = None,
) -> tuple[stomp.Connection12, dict[str, str]]:
    """Connect and log in to ``node``; return the connection and the CONNECTED headers.

    A failover group (``masterslave:(...)``) is tried member by member in order and the first
    that accepts is used: a slave or backup accepts nothing until it took over the store, so
    the live member is the one that answers. The caller's back-off applies to the whole group;
    when no member accepts, the error names each member's reason.

    ``listener`` gets the connection's frames from the start (deliveries can follow the
    SUBSCRIBE before it returns). The login waits at most ``options.connect_timeout_s``; the
    TCP connect at most ``socket_timeout_s`` (default: the same). ``options.heartbeat_ms`` 0
    asks for no heart-beats (a short-lived probe). Bodies stay bytes (``auto_decode=False``):
    message bodies are binary in the schema. ``client_id`` is the CONNECT's ``client-id`` (a
    durable topic subscription's owner).
    """
    if not node.members:
        return _open_member(node, options, listener, listener_name, socket_timeout_s, client_id)
    failures = []
    for member in node.endpoints():
        try:
            return _open_member(member, options, listener, listener_name, socket_timeout_s, client_id)
        except NodeUnavailable as exc:
            failures.append(exc)
    reasons = "; ".join(f"{f.node.name}: {f.reason}" for f in failures)
    raise NodeUnavailable(node, f"no member accepts ({reasons})", group_kind(failures))


def _open_member(
    node: Node,
    options: ConnectionOptions,
    listener: stomp.ConnectionListener | None,
    listener_name: str,
    socket_timeout_s: float | None,
    client_id: str | None = None,
) -> tuple[stomp.Connection12, dict[str, str]]:
    """One attempt at one address (a plain node or one member of a group); a failure is
    classified (refused, DNS, timeout, TLS, login: broker/reachability.py)."""
    heartbeat = options.heartbeat_ms
    socket_timeout = options.connect_timeout_s if socket_timeout_s is None else socket_timeout_s
    # ActiveMQ Classic writes a keep-alive only when it wrote nothing during the last whole
    # interval, so gaps of up to twice the interval are normal; stomp.py's default of 1.5x
    # declared healthy nodes dead under load, hence 2.5x (docs/broker-behaviour.md, "Heart-beats").
    conn = stomp.Connection12(
        [(node.host, node.port)],
        reconnect_attempts_max=1,
        heartbeats=(heartbeat, heartbeat),
        heart_beat_receive_scale=HEARTBEAT_RECEIVE_SCALE,
        timeout=socket_timeout,
        auto_decode=False,
        prefer_localhost=False,
        try_loopback_connect=False,
    )
    fastparse.install(conn)  # half of a reader's CPU was stomp.py's header parsing
    apply_tls(conn, node)
    # The login's own listener: whatever ``listener`` is, the outcome of CONNECT is known here.
    login = StompListener()
    conn.set_listener("clustermq-connect", login)
    if listener is not None:
        conn.set_listener(listener_name, listener)
    username, password = options.login
    register_secret(password)
    started = time.monotonic()
    try:
        conn.connect(username=username, passcode=password, wait=False,
                     headers={"client-id": client_id} if client_id is not None else None)
    except (StompException, OSError) as exc:
        _abandon(conn, listener_name)
        raise connect_failure(node, socket_timeout, time.monotonic() - started, exc) from None
    if not login.wait_settled(options.connect_timeout_s):
        _abandon(conn, listener_name)
        raise NodeUnavailable(node, (
            f"connected, but no CONNECTED frame within {options.connect_timeout_s:.1f} s (option "
            "connectTimeout): the node is overloaded or stalled, or the port is not STOMP"), TIMEOUT)
    if not login.connected.is_set() or not conn.is_connected():
        _abandon(conn, listener_name)
        if login.error is None and login.lost.is_set():
            raise closed_during_login(node, socket_timeout)
        reason = login.error if login.error is not None else "the node did not accept the CONNECT"
        if password:
            reason = reason.replace(password, "***")
        raise NodeUnavailable(node, f"login failed: {reason}", LOGIN)
    conn.remove_listener("clustermq-connect")
    if options.heartbeat_ms:
        _send_heartbeats_early(conn)
    return conn, login.connected_headers


def _abandon(conn: stomp.Connection12, listener_name: str) -> None:
    """Close a failed attempt without telling the caller's listener: the caller gets the error,
    and a "disconnected" from this attempt must not mark the next member's connection lost."""
    if conn.get_listener(listener_name) is not None:  # a caller without a listener set none
        conn.remove_listener(listener_name)
    _quiet_disconnect(conn)


def _send_heartbeats_early(conn: stomp.Connection12, wait_s: float = 1.0) -> None:
    """Send our heart-beats at half the interval promised in CONNECT.

    ActiveMQ Classic closes a STOMP connection when it read nothing for exactly the client's
    promised interval (``transport.hbGracePeriodMultiplier`` defaults to 1.0: "Channel was
    inactive for too (>1000) long" in the broker log), while stomp.py sends its keep-alive at
    exactly that interval, so any scheduling delay in this process makes the broker drop a
    healthy connection (docs/decisions.md, "Heart-beats: tolerance and keep-alives").
    STOMP allows sending more often than promised. stomp.py sets ``send_sleep`` in its own
    ``on_connected``, which runs after ours (listeners are called in name order), hence the
    short wait for it.
    """
    deadline = time.monotonic() + wait_s
    while not getattr(conn, "send_sleep", 0):
        if time.monotonic() > deadline or not conn.is_connected():
            return  # the broker refused heart-beats (0,0) or the connection is gone
        time.sleep(0.005)
    conn.send_sleep = conn.send_sleep / 2


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
    except Exception:
        pass
    transport = conn.transport
    if not getattr(transport, "running", True):
        # The receiver thread saw the socket close and is already closing it: shutting it down
        # here too races that close (stomp.py then logs "unable to issue SHUT_RDWR ... Bad file
        # descriptor"), so give it a moment to finish first.
        deadline = time.monotonic() + grace_s
        while getattr(transport, "socket", None) is not None and time.monotonic() < deadline:
            time.sleep(0.005)
    try:
        transport.disconnect_socket()
    except Exception:
        pass


def close_connection(conn: stomp.Connection12 | None) -> None:
    """Close without acknowledging: unacknowledged messages go back to the broker."""
    if conn is not None:
        _quiet_disconnect(conn)
