"""ActiveMQ Classic 5.x: prefetch counts messages, browse works, depth from the statistics plugin.

Classic has no STOMP management API, but with ``<statisticsBrokerPlugin/>`` a SEND to
``/queue/ActiveMQ.Statistics.Destination.<queue>`` with a ``reply-to`` is answered with one map
message per matching destination. Facts the depth probe relies on (5.18.3;
docs/broker-behaviour.md, "The statistics plugin's replies"):

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
"""

from __future__ import annotations

import json
import re
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass

from clustermq.broker.connection_options import TopicSubscription
from clustermq.broker.dialect.base import BrokerDialect
from clustermq.broker.frames import body_text
from clustermq.broker.queue_names import is_queue_pattern
from clustermq.broker.request import Requester
from clustermq.errors import DepthError

STATS_DESTINATION_PREFIX = "/queue/ActiveMQ.Statistics.Destination."
END_WITH_NULL = "ActiveMQ.Statistics.Destination.List.End.With.Null"
TRANSFORMATION = "jms-map-xml"
BROKER_STATS_DESTINATION = "/queue/ActiveMQ.Statistics.Broker"
BRIDGE_ADVISORY = "/topic/ActiveMQ.Advisory.NetworkBridge"
#: the transport connector whose port peers connect to (the name in Classic's default activemq.xml)
OWN_CLUSTER_CONNECTOR = "openwire"
#: the bridge advisories of the running bridges come at once after subscribing; then none
BRIDGE_REPLAY_QUIET_S = 0.5

_OUTSIDE_BMP = re.compile("[\U00010000-\U0010FFFF]")


@dataclass(frozen=True, repr=False)
class ClassicDialect(BrokerDialect):
    """ActiveMQ Classic 5.x: prefetch counts messages; JMSXGroupID is not returned on STOMP."""

    name: str = "classic"
    product: str = "ActiveMQ Classic"
    can_browse: bool = True
    hides_jms_group: bool = True
    #: a STOMP subscription to ``orders.>`` consumes every matching queue (broker/queue_names.py)
    queue_patterns_refused: str | None = None
    #: measured on a 3-node network: a durable subscriber on each node got every message three
    #: times; one on the first node got each once, those published while it was away included
    #: (docs/broker-behaviour.md, "Topics in a network of brokers")
    topic_on_every_node: bool = False
    #: a node holds dispatch back for ``timeBeforeDispatchStarts`` (1 s as recommended,
    #: docs/broker-behaviour.md) after a queue gets its first consumer; answered after 0.2 s, a
    #: fresh ``processingTime`` query's batch 0 came out empty, in queue_to_delta a whole cold
    #: sink run (16 s) before the first row
    first_delivery_wait_s: float = 2.0

    def topic_subscription(self, topic: TopicSubscription) -> tuple[str, dict[str, str]]:
        destination, headers = self.topic_destination(topic.topic)
        if topic.name is not None:
            headers["activemq.subscriptionName"] = topic.name
        return destination, headers

    def subscribe_headers(
        self, prefetch: int, window_bytes: int | None = None, *, body_bytes: int = 1024, batch_bytes: int = 0
    ) -> dict[str, str]:
        return {"activemq.prefetchSize": str(prefetch)}

    def selector_probe(self, token: str) -> tuple[str, dict[str, str]]:
        """A temporary queue: the node parses the selector when the consumer is created
        (InvalidSelectorException in the ERROR frame's body) and drops the queue with the
        connection."""
        return f"/temp-queue/clustermq-selector-{token}", {}

    def browse_headers(self) -> dict[str, str]:
        """A browser subscription; the broker ends the listing with a MESSAGE ``browser:end``."""
        return {"browser": "true", **self.routing_headers()}

    def browse_ended(self, headers: Mapping[str, str]) -> bool:
        return headers.get("browser") == "end"

    def header_value_problem(self, headers: Mapping[str, str]) -> str | None:
        """Characters outside the BMP: a network bridge turns each into two U+FFFD.

        On 5.18.3 such a value is delivered intact by the node it was sent to and replaced
        when the message crossed a bridge to a consumer on another node; bodies are intact
        either way (docs/broker-behaviour.md, "Header values outside the Basic Multilingual Plane";
        upstream AMQ-8398 (STOMP/OpenWire conversion of 4-byte UTF-8).
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

    def queue_depth(self, requests: Requester, queue: str) -> int:
        """``size`` of ``queue`` from the statistics plugin (0 when the node has no such queue);
        of a pattern, the sum over the queues the plugin matched (one reply each)."""
        correlation = _ask_statistics(requests, STATS_DESTINATION_PREFIX + queue, "depth",
                                      {END_WITH_NULL: "true"})
        pattern = is_queue_pattern(queue)
        wanted = f"queue://{queue}"
        depth = 0
        while True:
            frame = requests.reply(
                "statistics reply (is <statisticsBrokerPlugin/> on?)",
                lambda f: f.headers.get("correlation-id", correlation) == correlation,
            )
            try:
                stats = _parse_map(body_text(frame))
            except ET.ParseError as exc:
                raise DepthError(f"unreadable statistics reply ({exc}): {body_text(frame)[:200]!r}") from None
            if not stats:  # the empty map that ends the list
                return depth
            name = stats.get("destinationName", "")
            if name == wanted:
                depth = int(stats.get("size", "0"))
            elif pattern and name.startswith("queue://"):
                depth += int(stats.get("size", "0"))

    def cluster_members(self, requests: Requester) -> tuple[int, list[tuple[str, int]]]:
        """The node's own ``openwire`` transport port (statistics plugin, ``ActiveMQ.Statistics.Broker``)
        and, for each of its network bridges, the peer's published OpenWire port at the address
        the bridge is connected to (``ActiveMQ.Advisory.NetworkBridge``, which the broker replays
        for every running bridge to a new subscriber; ``jms-advisory-json``). On 5.18.3
        (docs/broker-behaviour.md, "Cluster members over STOMP (discovery)"): headers ``remoteIp: tcp:///127.0.0.1:57087@51164``, body
        ``{"BrokerInfo": {"brokerURL": "tcp://localhost:57087", "brokerName": "node1", ...}}``.
        A duplex bridge's ``remoteIp`` has the peer's ephemeral port, so the port comes from
        ``brokerURL`` and the host from ``remoteIp`` (``brokerURL`` names the host as the peer
        calls itself)."""
        _ask_statistics(requests, BROKER_STATS_DESTINATION, "members")
        frame = requests.reply("broker statistics reply (is <statisticsBrokerPlugin/> on?)",
                               lambda f: f.headers.get("subscription") == "members")
        stats = _parse_map(body_text(frame))
        own = _port_of(stats.get(OWN_CLUSTER_CONNECTOR, ""))
        if own is None:
            raise DepthError(f"the broker statistics name no '{OWN_CLUSTER_CONNECTOR}' transport "
                             f"connector: {sorted(stats)}")
        requests.subscribe(BRIDGE_ADVISORY, "bridges", {"transformation": "jms-advisory-json"})
        frames = requests.replies_until_quiet(
            BRIDGE_REPLAY_QUIET_S, lambda f: f.headers.get("subscription") == "bridges")
        requests.unsubscribe("bridges")
        peers: dict[tuple[str, int], bool] = {}
        for advisory in frames:
            try:
                info = json.loads(body_text(advisory)).get("BrokerInfo", {})
            except ValueError:
                continue
            port = _port_of(str(info.get("brokerURL", "")))
            remote = re.match(r"\w+://+\[?([^\]/:@]+)", advisory.headers.get("remoteIp", ""))
            if port is None or remote is None:
                continue
            peers[(remote.group(1), port)] = advisory.headers.get("started") == "true"
        return own, [peer for peer, started in peers.items() if started]


def _ask_statistics(
    requests: Requester, destination: str, sub_id: str, extra: Mapping[str, str] | None = None
) -> str:
    """Send a statistics plugin request whose map replies come to a temporary queue subscribed
    as ``sub_id`` (as XML, see the module docstring); return its correlation id.

    Non-persistent and expiring: on a broker *without* the plugin the request would land in a
    real queue named like ``destination``; this way it vanishes.
    """
    correlation = uuid.uuid4().hex
    reply_to = f"/temp-queue/clustermq-{sub_id}-{correlation}"
    requests.subscribe(reply_to, sub_id, {"transformation": TRANSFORMATION})
    expires_ms = int((time.time() + max(requests.remaining(), 1.0)) * 1000)
    requests.send(destination, {
        "reply-to": reply_to,
        "correlation-id": correlation,
        "persistent": "false",
        "expires": str(expires_ms),
        **(extra or {}),
    })
    return correlation


def _port_of(uri: str) -> int | None:
    """The port of a transport URI such as ``tcp://host:61616?x=y``."""
    match = re.match(r"[\w+]+://[^/?]*:(\d+)", uri)
    return int(match.group(1)) if match else None


def _parse_map(body: str) -> dict[str, str]:
    """XStream's ``<map><entry><string>key</string><long>5</long></entry>...</map>``."""
    root = ET.fromstring(body)
    result: dict[str, str] = {}
    for entry in root.findall("entry"):
        children = list(entry)
        if len(children) >= 2:
            result[children[0].text or ""] = children[1].text or ""
    return result
