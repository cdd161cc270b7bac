"""Every option the connector knows, declared once: name, kind, typed default, limits, meaning.

The parsers read every value through these objects (``HEARTBEAT.read(raw)``), and the README's
option table is checked row by row against :data:`OPTIONS` by a test, so code, defaults and
documentation cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clustermq.broker.dialect import DIALECTS
from clustermq.errors import OptionError
from clustermq.options.kinds import (
    Bool,
    Choice,
    File,
    Float,
    HeaderName,
    Millis,
    NodeList,
    Option,
    OptionalInt,
    QueueNames,
    Selector,
    Text,
)

#: ``auto`` reads the broker kind from the CONNECTED frame; the others are the known dialects
FLAVORS = ("auto", *DIALECTS)
ACK_MODES = ("client", "client-individual")
LOAD_BALANCING_POLICIES = ("roundRobin", "random", "randomSticky", "firstElement")
READ_MODES = ("browse", "drain")
TRANSPORTS = ("stomp", "amqp")
WRITE_MODES = ("atomic", "direct")
#: prefetchPerNode without maxMessagesPerTrigger (with it: twice the batch size)
PREFETCH_WITHOUT_LIMIT = 10000


def default_prefetch(max_messages_per_trigger: int | None) -> int:
    """prefetchPerNode's computed default, as its ``shown`` text says."""
    if max_messages_per_trigger:
        return 2 * max_messages_per_trigger
    return PREFETCH_WITHOUT_LIMIT


# ---------------------------------------------------------------------------- the table (README order)
BROKERS = NodeList("brokers", meaning="Comma-separated STOMP endpoints of the cluster nodes, `host:port` or `stomp+ssl://host:port`; a master/slave or primary/backup pair is one node, `masterslave:(host:port,host:port)`, members in failover order (docs/design.md, Failover pairs). Required.")
QUEUE = QueueNames("queue", meaning="Queue name (without `/queue/`). Required; or `topic` instead. Reading: also a comma-separated list of queues read as one source (`orders,payments`), each named once, and on Classic (over STOMP) patterns: `orders.>` reads every queue under `orders.`, `*` stands for one segment (Artemis has no queue patterns: refused); the `destination` column says which queue a row came from. Writing: one queue. Each name at most 1024 bytes; no spaces, control characters, `:` `*` `>` `#` `?` outside a pattern (brokers read them as wildcards or destination options).")
TOPIC = Text("topic", shown="none", meaning="The topic to read or write instead of a queue (without `/topic/`; the same name rules, no pattern). Reader: reads it through a subscription of its own: durable under `subscriptionName`, so that messages published while the query is stopped wait for it, and acknowledged on commit as a queue's. Classic keeps the subscription on the first node of `brokers` (the network of brokers forwards every node's messages to it, also while the query is stopped); Artemis on every node (the cluster gives each message to one of them; the topic's address must default to MULTICAST routing, docs/broker-behaviour.md, Topics over STOMP). Not with `mode=browse`, `transport=amqp`, `discovery=cluster`, `priorityNodes`, `selector` (docs/design.md, Topics). Writer: publishes every row to it, `atomic` through staging queues and a move over STOMP (never the broker's own move, which targets queues); no `destination` column.")
SUBSCRIPTION_NAME = Text("subscriptionName", shown="none", applies_to="read", meaning="With `topic`: the durable subscription's name, under the client id `clustermq.<topic>.<subscriptionName>`; one query per subscription (Classic refuses a second connection with that client id). Required unless `allowNonDurable=true`.")
ALLOW_NON_DURABLE = Bool("allowNonDurable", default=False, applies_to="read", meaning="With `topic` and no `subscriptionName`: read through a non-durable subscription, which loses every message published while the query is not running.")
FLAVOR = Choice("flavor", default="auto", allowed=FLAVORS, meaning="Broker kind: `auto` (from the CONNECTED frame's `server` header), " + " or ".join(f"`{name}`" for name in DIALECTS) + ".")
USERNAME = Text("username", meaning="Login user for every node.")
PASSWORD = Text("password", meaning="Login password. Never logged, never shown in errors, progress or `repr()`.")
NUM_PARTITIONS = OptionalInt("numPartitions", minimum=1, shown="number of nodes", applies_to="read", meaning="Spark partitions per micro-batch; rows are hash-partitioned by group id.")
MAX_MESSAGES_PER_TRIGGER = OptionalInt("maxMessagesPerTrigger", minimum=1, shown="none", applies_to="read", meaning="Upper bound on messages per micro-batch over all nodes.")
MAX_BYTES_PER_TRIGGER = OptionalInt("maxBytesPerTrigger", minimum=1, shown="none", applies_to="read", meaning="Upper bound on body bytes per micro-batch over all nodes (a batch holds at least one message).")
PREFETCH_PER_NODE = OptionalInt("prefetchPerNode", minimum=1, shown=f"2 x maxMessagesPerTrigger, else {PREFETCH_WITHOUT_LIMIT}", applies_to="read", meaning="Messages a node may deliver ahead of acknowledgement (Classic `activemq.prefetchSize`; Artemis `consumer-window-size`, sized in bytes from it, docs/design.md, Flavor differences); bounds driver memory and the largest batch per node. On Classic a node hands what a full reader cannot take to the other nodes, which keeps the brokers busy (four times their CPU under live traffic): size it to hold the lag a node can build up, its backlog after a restart or a slow batch's arrivals (docs/broker-behaviour.md, A cold backlog crosses the network; A full reader makes live traffic cross the network).")
GROUP_ID_HEADER = HeaderName("groupIdHeader", default="clustermq_group", meaning="Header that carries the group id where the broker does not return its own group header (Classic drops `JMSXGroupID` on STOMP).")
ACK_MODE = Choice("ackMode", default="client", allowed=ACK_MODES, applies_to="read", meaning="STOMP ack mode: `client` (one cumulative ACK per node per batch) or `client-individual`.")
INITIAL_RECONNECT_DELAY = Millis("initialReconnectDelay", default=1000, minimum=0, meaning="Milliseconds before the first reconnect attempt to a lost node.")
MAX_RECONNECT_DELAY = Millis("maxReconnectDelay", default=30000, minimum=1, meaning="Upper bound in milliseconds between reconnect attempts.")
USE_EXPONENTIAL_BACK_OFF = Bool("useExponentialBackOff", default=True, meaning="Grow the reconnect delay by `backOffMultiplier` after each failed attempt.")
BACK_OFF_MULTIPLIER = Float("backOffMultiplier", default=2.0, minimum=1.0, meaning="Factor of the exponential back-off.")
# Without a CA file the system trust store is used, and without a key file the key in the
# certificate file: both by the ssl module itself, where the connection is made.
SSL_CA_FILE = File("sslCaFile", shown="system trust store", meaning="PEM file of the CA(s) that signed the brokers' certificates, for `stomp+ssl://` nodes. Checked to exist when options are parsed.")
SSL_CERT_FILE = File("sslCertFile", meaning="Client certificate (PEM) for mutual TLS with `stomp+ssl://` nodes; may hold the private key too.")
SSL_KEY_FILE = File("sslKeyFile", shown="the key in sslCertFile", meaning="Unencrypted private key (PEM) of `sslCertFile`.")
SSL_VERIFY_HOSTNAME = Bool("sslVerifyHostname", default=True, meaning="Check that a `stomp+ssl://` node's certificate names the host given in `brokers` (SAN DNS or IP). The chain is always verified.")
CONNECT_TIMEOUT = Millis("connectTimeout", default=10000, minimum=1, meaning="Milliseconds to wait for a node's CONNECTED frame.")
HEARTBEAT = Millis("heartbeat", default=10000, minimum=0, meaning="STOMP heart-beat interval in milliseconds, both directions (0 disables); a node silent for 2.5 times this is declared lost.")
NO_NODE_TIMEOUT = Millis("noNodeTimeout", default=120000, minimum=1, applies_to="read", meaning="The query fails when no node has been reachable for this many milliseconds.")
AVAILABLE_NOW_IDLE_TIMEOUT = Millis("availableNowIdleTimeout", default=30000, minimum=1, applies_to="read", meaning="Trigger.AvailableNow: stop waiting for the backlog measured at start when, with every message received already planned, no message arrived for this many milliseconds while the queue still holds messages (a stalled Classic bridge holds them until it is rebuilt, about 10 s in the local cluster); a queue found empty ends the run within seconds (competing consumers took the rest). After a third of it (at most 3 s) nodes are resubscribed once, unless the queue was found empty; see docs/design.md.")
REPLAY_TIMEOUT = Millis("replayTimeout", default=60000, minimum=1, applies_to="read", meaning="Milliseconds a replayed batch waits for the brokers to redeliver its messages after a restart.")
LOAD_BALANCING_POLICY = Choice("loadBalancingPolicy", default="roundRobin", allowed=LOAD_BALANCING_POLICIES, applies_to="write", meaning="Writer: how a task picks the node for rows without a group id: `roundRobin` (task i of a job to node start + i), `random` (per task), `randomSticky` (one random node per job or streaming query), `firstElement` (the first listed node). Rows with a group id always go to the node their group hashes to.")
PERSISTENT = Bool("persistent", default=True, applies_to="write", meaning="Writer: send messages persistent (`persistent:true`), so they survive a broker restart.")
HEADERS_FROM_COLUMNS = Bool("headersFromColumns", default=False, applies_to="write", meaning="Writer: turn input columns other than `body`, `group_id`, `headers`, `priority`, `destination` into message headers (column name = header name) instead of rejecting them.")
RECEIPT_TIMEOUT = Millis("receiptTimeout", default=60000, minimum=1, applies_to="write", meaning="Writer: milliseconds to wait for a broker's RECEIPT of a COMMIT, and for the next staged message while the driver moves a job into the queue.")
WRITE_MODE = Choice("writeMode", default="atomic", allowed=WRITE_MODES, applies_to="write", meaning="Writer: `atomic` stages every task's messages and moves them into the queue when Spark commits the job, so a failed job or micro-batch publishes nothing. `direct` commits each task's messages straight into the queue in one transaction per node: faster, but a failed job keeps what its finished tasks committed, and a re-run task may add copies (see Writing).")
MODE = Choice("mode", default="browse", allowed=READ_MODES, applies_to="read", meaning="Batch read (`spark.read`): `browse` returns a snapshot of the queue on every node (one partition per node and queue) without consuming it: over STOMP on ActiveMQ Classic, over AMQP 1.0 (a `copy` receiver) on both brokers with `transport=amqp`. `drain` is refused: emptying a queue needs acknowledgement on commit, i.e. a streaming read with `Trigger.AvailableNow` (`export_backlog --mode drain`).")
BROWSE_IDLE_TIMEOUT = Millis("browseIdleTimeout", default=30000, minimum=1, applies_to="read", meaning="Batch read: milliseconds a node's browse may go without a message before the read fails.")

SELECTOR = Selector("selector", shown="none: every message", applies_to="read", meaning="Reader and browse: a JMS message selector (SQL-92 over headers and properties, e.g. `region = 'EU' AND amount > 100`), the STOMP `selector` header (AMQP: the `jms-selector` filter). Only matching messages are read; the rest stay on the queue for other consumers. Checked by a broker node when the query or read starts: a selector it refuses fails with its error before anything is consumed. A JMS producer's group is `JMSXGroupID` on Classic and `_AMQ_GROUP_ID` on Artemis. Classic does not reach a matching message queued on a node behind more than `maxPageSize` non-matching ones (docs/broker-behaviour.md). With `Trigger.AvailableNow` the run ends `availableNowIdleTimeout` after the last matching message (the queue's depth counts every message, so it cannot tell when the selected backlog is read); a browse with a selector is not checked against the depth.")
DISCOVERY = Choice("discovery", default="none", allowed=("none", "cluster"), meaning="`none`: `brokers` lists every node. `cluster`: `brokers` names one or a few seed nodes; the connector asks the first that answers for the cluster's members (Classic: statistics plugin and network-bridge advisories; Artemis: `listNetworkTopology` on the management address) and takes each peer's STOMP port to be its cluster port plus the seed's offset between the two (docs/design.md, Membership). A streaming read asks again every few seconds and subscribes to nodes that joined; a batch write asks once when it starts, a streaming write before every micro-batch.")
PRIORITY_NODES = Text("priorityNodes", shown="none: every node", meaning="Comma-separated nodes of `brokers`, written as there (a pair as its `masterslave:(...)` group), preferred over the others. Writer: they get every message while one of them is reachable, balanced over them by `loadBalancingPolicy` (rows with a group id by their group's hash over them); the other nodes get messages only while none of these is reachable. Each task and micro-batch tries them first again. Streaming reader: consumes from them, and from the others only while none of these is connected (the network forwards the others' messages to them); within a micro-batch of one coming back it stops reading the others, after acknowledging what it planned from them. Browse reads every node.")
TRANSPORT = Choice("transport", default="stomp", allowed=TRANSPORTS, applies_to="read", meaning="Reader and browse: `stomp` or `amqp` (AMQP 1.0 to `amqpBrokers`, python-qpid-proton). `amqp` fills `group_id` with a JMS producer's group on Classic too and `message_id` with the JMS message id (`ID:...`) on Artemis too, but costs several times the CPU per message (measured in `make bench`; see Compatibility); a browse over `amqp` works on Artemis too. Depth probes and the writer always use STOMP.")
AMQP_BROKERS = Text("amqpBrokers", shown="none", applies_to="read", meaning="With `transport=amqp` (required there, refused otherwise): the AMQP 1.0 endpoint `host:port` of every node of `brokers`, in the same order, a pair as `masterslave:(...)` with its members in the same order. Plain TCP with SASL PLAIN (TLS not supported); not with `discovery=cluster`.")
INCLUDE_DELIVERY_COUNT = Bool("includeDeliveryCount", default=False, applies_to="read", meaning="Reader and browse, with `transport=amqp` (refused otherwise: neither broker's STOMP frames carry the count, only `redelivered`): add the column `delivery_count` (int), how many times the broker has delivered the message, this delivery included (JMS `JMSXDeliveryCount`; 1 the first time). It shows a message that keeps coming back nearing the broker's limit (Artemis `max-delivery-attempts`): a stopped or failed run settles the batch it did not acknowledge as failed deliveries, which Artemis counts (the whole batch reaches the limit together) and Classic does not (docs/broker-behaviour.md).")

OPTIONS: tuple[Option[Any], ...] = (
    BROKERS, QUEUE, FLAVOR, USERNAME, PASSWORD, NUM_PARTITIONS, MAX_MESSAGES_PER_TRIGGER,
    MAX_BYTES_PER_TRIGGER, PREFETCH_PER_NODE, GROUP_ID_HEADER, ACK_MODE, INITIAL_RECONNECT_DELAY,
    MAX_RECONNECT_DELAY, USE_EXPONENTIAL_BACK_OFF, BACK_OFF_MULTIPLIER, SSL_CA_FILE, SSL_CERT_FILE,
    SSL_KEY_FILE, SSL_VERIFY_HOSTNAME, CONNECT_TIMEOUT, HEARTBEAT, NO_NODE_TIMEOUT,
    AVAILABLE_NOW_IDLE_TIMEOUT, REPLAY_TIMEOUT, LOAD_BALANCING_POLICY, PERSISTENT,
    HEADERS_FROM_COLUMNS, RECEIPT_TIMEOUT, WRITE_MODE, MODE, BROWSE_IDLE_TIMEOUT, DISCOVERY,
    PRIORITY_NODES, TRANSPORT, AMQP_BROKERS, SELECTOR, INCLUDE_DELIVERY_COUNT, TOPIC,
    SUBSCRIPTION_NAME, ALLOW_NON_DURABLE,
)
#: every option by its name as users write it (``SPEC["heartbeat"]``)
SPEC: dict[str, Option[Any]] = {option.name: option for option in OPTIONS}
TLS_OPTIONS = (SSL_CA_FILE, SSL_CERT_FILE, SSL_KEY_FILE, SSL_VERIFY_HOSTNAME)


def known_options(applies_to: str) -> list[str]:
    return [s.name for s in OPTIONS if s.applies_to in (applies_to, "both")]


def check_known(raw: Mapping[str, str], applies_to: str) -> dict[str, str]:
    """``raw`` with lower-cased names; an unknown name fails listing the known ones."""
    allowed = {n.lower(): n for n in known_options(applies_to)}
    lowered: dict[str, str] = {}
    for key, value in raw.items():
        k = key.lower()
        if k == "path":  # Spark passes load(path)/save(path) as option "path"
            continue
        if k not in allowed:
            role = {"write": "writer"}.get(applies_to, f"{applies_to}er")
            raise OptionError(
                f"unknown option '{key}' for the clustermq {role}; "
                f"known options: {', '.join(sorted(allowed.values()))}"
            )
        lowered[k] = value
    return lowered
