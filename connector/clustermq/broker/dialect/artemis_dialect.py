"""ActiveMQ Artemis 2.x: flow control in bytes, groups in ``_AMQ_GROUP_ID``, no browse.

The depth probe asks the management address ``activemq.management`` (2.40.0, JMX management
disabled; docs/broker-behaviour.md, "Management replies (queue depth)"):

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
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clustermq.broker.connection_options import TopicSubscription
from clustermq.broker.dialect.base import BrokerDialect
from clustermq.broker.frames import body_text
from clustermq.broker.request import Requester
from clustermq.errors import DepthError

MANAGEMENT_ADDRESS = "activemq.management"
#: bytes flow control charges per message beyond the body (headers, envelope), with room to
#: spare: about 270 for a 200-byte body (docs/broker-behaviour.md, "`consumer-window-size` counts bytes")
OVERHEAD_BYTES = 512
MIN_WINDOW_BYTES = 64 * 1024
MAX_WINDOW_BYTES = 1 << 30


@dataclass(frozen=True, repr=False)
class ArtemisDialect(BrokerDialect):
    """ActiveMQ Artemis 2.x: flow control in bytes, groups in ``_AMQ_GROUP_ID``, no browse.

    Artemis 2.40.0 over STOMP 1.2 (docs/broker-behaviour.md, "ActiveMQ Artemis"):

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
    product: str = "ActiveMQ Artemis"
    queue_patterns_refused: str | None = (
        "an Artemis wildcard subscription is a new queue that gets a copy of each message sent "
        "to a matching address after it exists; it reads none of the queues' backlogs and takes "
        "nothing off them")
    group_header: str | None = "_AMQ_GROUP_ID"
    can_browse: bool = False
    transactional_ack: bool = False
    drops_duplicates: bool = True
    #: measured on 2.40: a message moveMessages moved arrived with no expiration
    #: (docs/broker-behaviour.md, "Moving inside the broker (`moveMessages`)")
    move_keeps_expiration: bool = False

    def destination(self, queue: str) -> str:
        return queue[len("/queue/"):] if queue.startswith("/queue/") else queue

    def routing_headers(self) -> dict[str, str]:
        return {"destination-type": "ANYCAST"}

    def topic_destination(self, topic: str) -> tuple[str, dict[str, str]]:
        return topic, {"destination-type": "MULTICAST"}

    def topic_subscription(self, topic: TopicSubscription) -> tuple[str, dict[str, str]]:
        """A multicast subscription on the bare address; durable: a queue named
        ``<client id>.<name>`` that lives on after the consumer, one per node, which the cluster
        treats as one (each message goes to one of them, and redistribution moves a node's
        messages to one whose queue has a consumer)."""
        destination, headers = self.topic_destination(topic.topic)
        headers["subscription-type"] = "MULTICAST"
        if topic.name is not None:
            headers["durable-subscription-name"] = topic.name
        return destination, headers

    def tells_subscription_depth(self, topic: TopicSubscription) -> bool:
        """A durable subscription is a named queue; a non-durable one has a generated name."""
        return topic.name is not None

    def subscription_depth(self, requests: Requester, topic: TopicSubscription) -> int:
        if not self.tells_subscription_depth(topic):
            return super().subscription_depth(requests, topic)
        return self.queue_depth(requests, f"{topic.client_id}.{topic.name}")

    def selector_probe(self, token: str) -> tuple[str, dict[str, str]]:
        """A multicast address of its own (auto-created, as the management replies' are): the
        subscription is a non-durable queue with the selector as its filter, parsed when it is
        created ('Invalid selector' ERROR, then the node closes the connection) and deleted
        with the consumer."""
        return f"clustermq.selector.{token}", {"destination-type": "MULTICAST"}

    def subscribe_headers(
        self, prefetch: int, window_bytes: int | None = None, *, body_bytes: int = 1024, batch_bytes: int = 0
    ) -> dict[str, str]:
        headers = dict(self.routing_headers())
        if window_bytes is None:
            window_bytes = self.window_bytes(prefetch, body_bytes, batch_bytes)
        headers["consumer-window-size"] = str(window_bytes)
        return headers

    @staticmethod
    def window_bytes(prefetch: int, body_bytes: int, batch_bytes: int) -> int:
        """``consumer-window-size`` for ``prefetch`` messages of about ``body_bytes`` each.

        Room for a full batch of ``prefetch`` messages ahead of acknowledgement (the 10 KiB
        default would cap a batch at a few dozen messages), yet memory stays bounded in bytes;
        a byte-limited batch must fit twice (the next one is buffered while one is processed).
        """
        window = prefetch * (body_bytes + OVERHEAD_BYTES)
        if batch_bytes:
            window = max(window, 2 * batch_bytes)
        return max(MIN_WINDOW_BYTES, min(window, MAX_WINDOW_BYTES))

    def duplicate_id_headers(self, message_key: str) -> dict[str, str]:
        return {"_AMQ_DUPL_ID": message_key}

    def message_id(self, headers: Mapping[str, str], node: str) -> str | None:
        """``<message id>@<node>``: the message id is only unique within one node's journal."""
        value = headers.get("message-id")
        if not value:
            return None
        return f"{value.rsplit(',', 1)[-1]}@{node}"

    def queue_depth(self, requests: Requester, queue: str) -> int:
        """``messageCount`` of ``queue`` (0 when the node has no such queue)."""
        self.check_queue_patterns((queue,))
        ok, result = _management_request(requests, f"queue.{queue}", "messageCount")
        if ok:
            try:
                return int(result)  # type: ignore[call-overload]  # the JSON reply's number
            except (TypeError, ValueError):
                raise DepthError(f"unexpected messageCount reply: {result!r}") from None
        # The same failure text covers "no such queue" and real problems: tell them apart.
        listed, names = _management_request(requests, "broker", "queueNames")
        if listed and isinstance(names, list) and queue not in names:
            return 0
        raise DepthError(f"management request for queue.{queue} messageCount failed: {result}")


    def cluster_members(self, requests: Requester) -> tuple[int, list[tuple[str, int]]]:
        """The broker's ``listNetworkTopology``: every live node as ``host:port`` of its cluster
        connector, and the broker's own ``nodeID`` to tell itself apart (2.40.0:
        ``[{"nodeID": ..., "live": "127.0.0.1:39855", "primary": ...}, ...]``;
        docs/broker-behaviour.md, "Cluster topology and scale-down")."""
        ok, own = _management_request(requests, "broker", "nodeID")
        if not ok:
            raise DepthError(f"management request for the broker's nodeID failed: {own}")
        ok, listed = _management_request(requests, "broker", "listNetworkTopology", operation=True)
        if not ok:
            raise DepthError(f"listNetworkTopology failed: {listed}")
        try:
            members = json.loads(listed) if isinstance(listed, str) else listed
            own_port = None
            peers = []
            for member in members:  # type: ignore[union-attr]
                host, _, port = str(member["live"]).rpartition(":")
                if member.get("nodeID") == own:
                    own_port = int(port)
                else:
                    peers.append((host, int(port)))
        except (TypeError, ValueError, KeyError) as exc:
            raise DepthError(f"unexpected listNetworkTopology reply ({exc}): {listed!r}") from None
        if own_port is None:
            raise DepthError(f"listNetworkTopology does not list the broker itself: {listed!r}")
        return own_port, peers

    def can_manage(self, requests: Requester) -> bool:
        """Whether the broker answers a management request: the login has ``manage``."""
        try:
            ok, _ = _management_request(requests, "broker", "version")
        except DepthError:
            return False
        return ok

    def queue_names(self, requests: Requester, prefix: str) -> list[str]:
        ok, names = _management_request(requests, "broker", "queueNames")
        if not ok or not isinstance(names, list):
            raise DepthError(f"management request for the broker's queueNames failed: {names}")
        return sorted(n for n in names if isinstance(n, str) and n.startswith(prefix))

    def move_messages(self, requests: Requester, source: str, target: str, selector: str,
                      limit: int) -> int:
        """``moveMessages(flushLimit, filter, otherQueueName, rejectDuplicates, messageCount)``
        of queue ``source``, at most ``limit`` messages in one transaction. On 2.40.0
        (docs/broker-behaviour.md, "Moving inside the broker"): the copies go to ``target``'s
        queue on the same node in ``source``'s order; with ``rejectDuplicates`` a copy whose
        ``_AMQ_DUPL_ID`` the target address already has is dropped alone (and counted). The
        target must exist on the node (else AMQ229049): it is then created as the broker would
        on first use, and the move asked again."""
        args = [limit, selector, target, True, limit]
        ok, result = _management_request(requests, f"queue.{source}", "moveMessages", True, args)
        if not ok and "AMQ229049" in str(result):
            config = {"name": target, "address": target, "routing-type": "ANYCAST",
                      "durable": True, "auto-created": True}
            _management_request(requests, "broker", "createQueue", True, [json.dumps(config)])
            ok, result = _management_request(requests, f"queue.{source}", "moveMessages", True, args)
        if not ok or not isinstance(result, int):
            raise DepthError(f"moveMessages from {source} to {target} failed: {result}")
        return result

    def destroy_queue(self, requests: Requester, name: str) -> None:
        ok, result = _management_request(requests, "broker", "destroyQueue", True, [name, True, True])
        if not ok and "AMQ229017" not in str(result):  # already gone
            raise DepthError(f"destroyQueue {name} failed: {result}")


def _management_request(
    requests: Requester, resource: str, name: str, operation: bool = False, args: Sequence[object] = ()
) -> tuple[bool, object]:
    """Read one management attribute or call an operation with ``args``; return
    (succeeded, the decoded JSON result).

    An operation's arguments are a JSON array in a *text* body: a STOMP frame with a
    ``content-length`` header arrives as a bytes message, which the broker cannot read
    (ERROR AMQ339011), so the request goes without one.
    """
    if requests.reply_address is None:
        token = uuid.uuid4().hex
        reply_to, sub_id = f"clustermq.depth.{token}", f"depth-{token}"
        requests.subscribe(reply_to, sub_id, {"destination-type": "MULTICAST"})
        if requests.keep_reply:
            requests.reply_address = (reply_to, sub_id)
    else:
        reply_to, sub_id = requests.reply_address
    headers = {
        "_AMQ_ResourceName": resource,
        "_AMQ_OperationName" if operation else "_AMQ_Attribute": name,
        "reply-to": reply_to,
        "persistent": "false",
    }
    if operation:
        requests.send_text(MANAGEMENT_ADDRESS, headers, json.dumps(list(args)))
    else:
        requests.send(MANAGEMENT_ADDRESS, headers)
    try:
        frame = requests.reply(f"management reply for {resource} {name}",
                               lambda f: f.headers.get("subscription") == sub_id)
    except DepthError:
        requests.reply_address = None  # a late reply must not answer the next request
        raise
    if requests.reply_address is None:
        requests.unsubscribe(sub_id)
    body = body_text(frame)
    try:
        result = json.loads(body) if body.strip() else None
    except ValueError:
        raise DepthError(f"unreadable management reply: {body[:200]!r}") from None
    if isinstance(result, list) and len(result) == 1:
        result = result[0]
    return frame.headers.get("_AMQ_OperationSucceeded") == "true", result
