"""Queue depth per broker node over STOMP: Classic's statistics plugin, Artemis's management address.

In a network of brokers a queue has a separate depth on every node (messages move between nodes,
they are not shared), so the backlog of a queue is the per-node table plus its total. Classic has
no STOMP management API, but with ``<statisticsBrokerPlugin/>`` a SEND to
``/queue/ActiveMQ.Statistics.Destination.<queue>`` with a ``reply-to`` is answered with one map
message per matching destination. Facts this module relies on (measured on 5.18.3):

* The reply is a JMS MapMessage. STOMP clients only see its content when the subscription asks
  for a transformation (``jms-map-xml`` or ``jms-map-json``); the broker then serialises it with
  XStream (+ Jettison for JSON), which the Maven distribution has in ``lib/optional`` (on the
  class path by default; Debian's package lacks them). XML is used here because Jettison's JSON
  collapses string-valued entries into arrays, which is awkward to parse.
* A queue that does not exist gets *no* reply at all, unless the request carries the property
  ``ActiveMQ.Statistics.Destination.List.End.With.Null``: then an empty map (``<map/>``) ends
  the list of replies, so "no such queue" (depth 0) is distinguishable from "no answer".
* ``destinationName`` in the reply is ``queue://<name>``; ``size`` is the number of messages
  currently held by that node (including dispatched-but-unacknowledged ones).
* The request's ``correlation-id`` is copied to each reply.
* Without the plugin nothing answers and the request would sit in a queue literally named
  ``ActiveMQ.Statistics.Destination.<queue>``; requests are therefore sent non-persistent with an
  ``expires`` time.

Artemis (the CONNECTED frame's ``server`` header names it) answers management messages sent to
the address ``activemq.management`` (measured on 2.40.0, JMX management disabled):

* A SEND with ``_AMQ_ResourceName:queue.<name>``, ``_AMQ_Attribute:messageCount`` and a
  ``reply-to`` address gets one reply there with ``_AMQ_OperationSucceeded:true`` and the body
  ``[<count>]`` (JSON). The count includes delivered-but-unacknowledged messages, like Classic's
  ``size``. The user needs the ``manage`` permission on the management address.
* A queue that does not exist on that node gets ``_AMQ_OperationSucceeded:false`` with the body
  ``["Problem while retrieving attribute messageCount"]`` - the same text any failure gives - so
  the broker's ``queueNames`` attribute is asked next: a name missing there is depth 0.
* The reply address is a fresh multicast address with a non-durable subscription: the broker
  deletes the subscription queue when the subscription ends, whatever the cluster's
  auto-delete settings are.
"""

from __future__ import annotations

import json
import queue as queue_mod
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import stomp

from clustermq.broker.connection import apply_tls, register_secret, tls_failure
from clustermq.broker.nodes import Node
from clustermq.broker.queue_names import destination_queue_name
from clustermq.broker.settings import ConnectionOptions
from clustermq.errors import DepthError

STATS_DESTINATION_PREFIX = "/queue/ActiveMQ.Statistics.Destination."
END_WITH_NULL = "ActiveMQ.Statistics.Destination.List.End.With.Null"
TRANSFORMATION = "jms-map-xml"
ARTEMIS_MANAGEMENT_ADDRESS = "activemq.management"


class QueueDepths(dict):  # dict[str, int | None]
    """Depth per node name, in node order; ``None`` where the node could not be asked.

    ``errors`` maps the name of every such node to the reason.
    """

    def __init__(self, queue: str) -> None:
        super().__init__()
        self.queue = queue
        self.errors: dict[str, str] = {}

    @property
    def total(self) -> int:
        """Sum over the nodes that answered."""
        return sum(v for v in self.values() if v is not None)

    @property
    def complete(self) -> bool:
        """Whether every node answered (only then is ``total`` the queue's whole backlog)."""
        return not self.errors




class _Replies(stomp.ConnectionListener):
    """Collects frames from stomp.py's receiver thread for the requesting thread."""

    def __init__(self) -> None:
        self.frames: queue_mod.Queue[tuple[str, stomp.utils.Frame | None]] = queue_mod.Queue()
        self.connected = threading.Event()
        self.disconnected = threading.Event()

    server: str = ""

    def on_connected(self, frame) -> None:  # type: ignore[no-untyped-def]
        self.server = frame.headers.get("server", "")
        self.connected.set()
        self.frames.put(("connected", frame))

    def on_message(self, frame) -> None:  # type: ignore[no-untyped-def]
        self.frames.put(("message", frame))

    def on_receipt(self, frame) -> None:  # type: ignore[no-untyped-def]
        self.frames.put(("receipt", frame))

    def on_error(self, frame) -> None:  # type: ignore[no-untyped-def]
        self.frames.put(("error", frame))

    def on_disconnected(self) -> None:
        self.disconnected.set()
        self.frames.put(("disconnected", None))

    def next(self, deadline: float, waiting_for: str) -> tuple[str, stomp.utils.Frame | None]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DepthError(f"no {waiting_for} before the timeout")
        try:
            kind, frame = self.frames.get(timeout=remaining)
        except queue_mod.Empty:
            raise DepthError(f"no {waiting_for} before the timeout") from None
        if kind == "error":
            message = frame.headers.get("message", "") if frame else ""
            raise DepthError(f"broker sent ERROR: {message or (frame.body if frame else '')}".strip())
        if kind == "disconnected":
            raise DepthError(f"connection closed while waiting for {waiting_for}")
        return kind, frame


def _parse_map(body: str | bytes) -> dict[str, str]:
    """XStream's ``<map><entry><string>key</string><long>5</long></entry>...</map>``."""
    root = ET.fromstring(body)
    result: dict[str, str] = {}
    for entry in root.findall("entry"):
        children = list(entry)
        if len(children) >= 2:
            result[children[0].text or ""] = children[1].text or ""
    return result


def queue_depth(node: Node, queue: str, username: str | None, password: str | None, timeout: float = 10.0) -> int:
    """Depth of ``queue`` on one node; ``DepthError`` when the node cannot tell."""
    name = destination_queue_name(queue)
    deadline = time.monotonic() + timeout
    replies = _Replies()
    conn = stomp.Connection12(
        [(node.host, node.port)],
        heartbeats=(0, 0),
        reconnect_attempts_max=1,
        timeout=max(0.5, min(timeout, 5.0)),  # socket connect timeout only
    )
    apply_tls(conn, node)  # the node's sslCaFile/... settings, as for every other connection
    conn.set_listener("depth", replies)
    try:
        try:
            register_secret(password)
            conn.connect(username, password, wait=False)
        except stomp.exception.ConnectFailedException:
            reason = tls_failure(node, max(0.5, min(timeout, 5.0)))
            raise DepthError(f"cannot connect to {node.name}" + (f": {reason}" if reason else "")) from None
        # stomp.py's connect(wait=True) has no overall deadline: wait for CONNECTED ourselves.
        while not replies.connected.is_set():
            try:
                replies.next(deadline, "CONNECTED frame")
            except DepthError as exc:
                if "connection closed" in str(exc):  # Classic may drop a bad login without ERROR
                    raise DepthError("connection closed by the broker before CONNECTED (login refused?)") from None
                raise
        if _is_artemis(replies.server):
            return _artemis_depth(conn, replies, name, deadline)
        correlation = uuid.uuid4().hex
        reply_to = f"/temp-queue/clustermq-depth-{correlation}"
        conn.subscribe(
            reply_to,
            id="depth",
            ack="auto",
            headers={"transformation": TRANSFORMATION, "receipt": f"sub-{correlation}"},
        )
        # The reply must not reach the temp queue before the subscription exists.
        while True:
            kind, frame = replies.next(deadline, "SUBSCRIBE receipt")
            if kind == "receipt":
                break
        # Non-persistent and expiring: on a broker *without* the plugin the request would land
        # in a real queue named ActiveMQ.Statistics.Destination.<queue>; this way it vanishes.
        expires_ms = int((time.time() + max(timeout, 1.0)) * 1000)
        conn.send(
            STATS_DESTINATION_PREFIX + name,
            "",
            headers={
                "reply-to": reply_to,
                END_WITH_NULL: "true",
                "correlation-id": correlation,
                "persistent": "false",
                "expires": str(expires_ms),
            },
        )
        wanted = f"queue://{name}"
        depth = 0
        while True:
            kind, frame = replies.next(deadline, "statistics reply (is <statisticsBrokerPlugin/> on?)")
            if kind != "message" or frame is None:
                continue
            if frame.headers.get("correlation-id", correlation) != correlation:
                continue
            try:
                stats = _parse_map(frame.body)
            except ET.ParseError as exc:
                raise DepthError(f"unreadable statistics reply ({exc}): {str(frame.body)[:200]!r}") from None
            if not stats:  # the empty map that ends the list
                return depth
            if stats.get("destinationName") == wanted:
                depth = int(stats.get("size", "0"))
    finally:
        _close(conn, replies)


def _is_artemis(server_header: str) -> bool:
    """Whether the CONNECTED frame's ``server`` header names ActiveMQ Artemis."""
    return "artemis" in server_header.lower()


def _artemis_request(
    conn: stomp.Connection12, replies: _Replies, resource: str, attribute: str, deadline: float
) -> tuple[bool, object]:
    """Read one management attribute; return (succeeded, the decoded JSON result)."""
    token = uuid.uuid4().hex
    reply_to = f"clustermq.depth.{token}"
    sub_id = f"depth-{token}"
    conn.subscribe(
        reply_to,
        id=sub_id,
        ack="auto",
        headers={"destination-type": "MULTICAST", "receipt": f"sub-{token}"},
    )
    while True:  # the reply must not be routed before the subscription exists
        kind, frame = replies.next(deadline, "SUBSCRIBE receipt")
        if kind == "receipt" and frame is not None and frame.headers.get("receipt-id") == f"sub-{token}":
            break
    conn.send(
        ARTEMIS_MANAGEMENT_ADDRESS,
        "",
        headers={
            "_AMQ_ResourceName": resource,
            "_AMQ_Attribute": attribute,
            "reply-to": reply_to,
            "persistent": "false",
        },
    )
    while True:
        kind, frame = replies.next(deadline, f"management reply for {resource} {attribute}")
        if kind != "message" or frame is None or frame.headers.get("subscription") != sub_id:
            continue
        break
    try:
        conn.unsubscribe(id=sub_id)
    except Exception:
        pass
    body = frame.body.decode("utf-8", "replace") if isinstance(frame.body, bytes) else str(frame.body)
    try:
        result = json.loads(body) if body.strip() else None
    except ValueError:
        raise DepthError(f"unreadable management reply: {body[:200]!r}") from None
    if isinstance(result, list) and len(result) == 1:
        result = result[0]
    return frame.headers.get("_AMQ_OperationSucceeded") == "true", result


def _artemis_depth(conn: stomp.Connection12, replies: _Replies, name: str, deadline: float) -> int:
    """``messageCount`` of queue ``name`` on an Artemis node (0 when the node has no such queue)."""
    ok, result = _artemis_request(conn, replies, f"queue.{name}", "messageCount", deadline)
    if ok:
        try:
            return int(result)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise DepthError(f"unexpected messageCount reply: {result!r}") from None
    # The same failure text covers "no such queue" and real problems: tell them apart.
    listed, names = _artemis_request(conn, replies, "broker", "queueNames", deadline)
    if listed and isinstance(names, list) and name not in names:
        return 0
    raise DepthError(f"management request for queue.{name} messageCount failed: {result}")


def _close(conn: stomp.Connection12, replies: _Replies) -> None:
    """DISCONNECT politely, but never wait long: the socket is closed after 2 s regardless.

    (stomp.py's ``transport.stop()`` waits for the DISCONNECT receipt without a deadline.)
    """
    try:
        if conn.is_connected():
            conn.disconnect()
            replies.disconnected.wait(2.0)
    except Exception:
        pass
    conn.transport.disconnect_socket()


def queue_depths(
    nodes: Iterable[Node],
    queue: str,
    username: str | None,
    password: str | None,
    timeout: float = 10.0,
) -> QueueDepths:
    """Depth of ``queue`` on every node, asked in parallel; unreachable nodes map to ``None``.

    One node failing (down, refusing the login, plugin off) never hides the others' answers:
    its reason is in the result's ``errors``.
    """
    node_list: Sequence[Node] = list(nodes)
    name = destination_queue_name(queue)
    result = QueueDepths(name)
    if not node_list:
        return result
    with ThreadPoolExecutor(max_workers=len(node_list), thread_name_prefix="clustermq-depth") as pool:
        futures = [pool.submit(queue_depth, n, name, username, password, timeout) for n in node_list]
        for node, future in zip(node_list, futures):
            try:
                result[node.name] = future.result()
            except Exception as exc:
                result[node.name] = None
                result.errors[node.name] = str(exc) or type(exc).__name__
    return result


def connection_depths(conn: ConnectionOptions) -> QueueDepths:
    """``queue_depths`` of the connector's queue, connecting as the reader does (login, TLS
    settings, ``connectTimeout``)."""
    username, password = conn.login
    return queue_depths(list(conn.nodes), conn.queue, username, password,
                        timeout=conn.connect_timeout_s)


def format_depth_table(depths: QueueDepths) -> str:
    """A plain-text table: one row per node, then the total (flagged when incomplete)."""
    width = max([len("total"), len("node")] + [len(n) for n in depths])
    lines = [f"queue {depths.queue}", f"{'node':<{width}}  {'depth':>10}"]
    for name, depth in depths.items():
        if depth is None:
            lines.append(f"{name:<{width}}  {'?':>10}  ({depths.errors.get(name, 'no answer')})")
        else:
            lines.append(f"{name:<{width}}  {depth:>10}")
    total = f"{'total':<{width}}  {depths.total:>10}"
    if not depths.complete:
        total += f"  (incomplete: {len(depths.errors)} of {len(depths)} nodes did not answer)"
    lines.append(total)
    return "\n".join(lines)
