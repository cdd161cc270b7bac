"""ActiveMQ Classic (5.18) nodes: config rendering, the JVM command line, bridge state.

Each node runs as a plain ``java -jar bin/activemq.jar start xbean:file:...`` process (not via
the ``bin/activemq`` shell wrapper, which forks and would leave us holding the wrong pid), with
``activemq.base``/``conf``/``data`` pointing into the node's own directory so nodes share the
read-only distribution and nothing else. ``activemq.jar`` puts ``lib/optional`` on the class path,
which is where the XStream and Jettison jars live: the statistics plugin's map replies need them
to be transformed to XML/JSON for STOMP clients.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from clustermq.devtools.localcluster import process
from clustermq.devtools.localcluster.broker_flavor import BrokerFlavor, JmsClientRun, Progress
from clustermq.devtools.localcluster.certificates import keystore_password
from clustermq.devtools.localcluster.failover_pairs import (
    LOCK_ACQUIRE_SLEEP_MS,
    is_paired,
    logical_index,
    members,
    store_dir,
)
from clustermq.devtools.localcluster.fetch import CLASSIC_VERSION, distribution_home
from clustermq.devtools.localcluster.state import ClusterState, NodeState
from clustermq.devtools.localcluster.templates import load_template, render, write_file, xml_attr

HEAP_MIN = "256m"
# A run that wants more broker memory sets CLUSTERMQ_CLASSIC_HEAP (a JVM size, e.g. 1g) and
# CLUSTERMQ_CLASSIC_MEMORY_PERCENT (memoryUsage as a share of the heap) when the cluster starts;
# a million-message backlog fits the defaults (CURSOR_HIGH_WATER_MARK).
HEAP_MAX = os.environ.get("CLUSTERMQ_CLASSIC_HEAP", "512m")
MEMORY_PERCENT_OF_HEAP = int(os.environ.get("CLUSTERMQ_CLASSIC_MEMORY_PERCENT", "60"))
STORE_LIMIT = "4 gb"
TEMP_LIMIT = "2 gb"
MAX_FRAME_SIZE = 64 * 1024 * 1024
# Peers retry a lost bridge with exponential back-off up to this delay: small, so a restarted node
# rejoins the mesh within seconds instead of the default 30 s.
MAX_RECONNECT_DELAY_MS = 2000
# A bridge whose peer sent nothing (not even a keep-alive) for this long is closed and rebuilt;
# OpenWire's default of 30 s kept messages in flight to a stuck bridge past an AvailableNow
# drain's idle timeout (docs/broker-behaviour.md, "Network bridges: a stalled bridge holds its
# messages"; see activemq.xml.tmpl, allowLinkStealing).
BRIDGE_INACTIVITY_MS = 10000
# Messages a queue pages in per dispatch pass. Passes run on events such as an ACK, and the
# reader ACKs once per committed batch: with Classic's default of 200 drains ran in batches of a
# few hundred messages per node (docs/broker-behaviour.md, "The queue's page size (`maxPageSize`)").
MAX_PAGE_SIZE = 5000
# How long a queue waits after its first consumer before it dispatches, so a reader that
# subscribes node by node has its own subscription on every node before the network can ship a
# node's backlog (and pin its groups) to another node (activemq.xml.tmpl, broker-behaviour.md).
DISPATCH_START_MS = 1000
# How many recent messages per producer a queue's cursor audit remembers (Classic's default
# 10,000). The audit is what stops a copy of a message the node still holds (a bridge's copy
# replayed back to its origin) before it is paged in next to the original, where Classic
# dead-letters the copy and drops the original from the queue (docs/broker-behaviour.md, "A copy
# that comes back to a node that still holds the message"). A copy comes back as late as a batch
# is long: the reader holds its messages unacknowledged until the batch commits, and one load
# generator producer sends far more than 10,000 messages in that time. About 1 bit per message
# and producer (64 producers audited per queue).
MAX_AUDIT_DEPTH = 100_000
#: How long a message must have been on a node before the node replays it to the node it came
#: from, once the node has no consumer left (``replayWhenNoConsumers``; the factory's default
#: is 0). A replay sent sooner can reach the origin before the origin has taken the bridge's
#: acknowledgement of the original: the origin drops the copy as a duplicate, then removes the
#: original, and the message is gone from both (docs/broker-behaviour.md, "A copy that comes
#: back to a node that still holds the message").
REPLAY_DELAY_MS = 2000
#: How often a queue checks for expired messages (Classic's default 30 s). The check is also a
#: dispatch pass: a message the replay delay held back is replayed at the first pass after the
#: delay, and on a queue with no other traffic that pass is this one (measured on two nodes: a
#: departed consumer's 160-200 messages were back on the origin 1.9-2.9 s after it left; 26 s
#: with the default period, 0.1-0.7 s without the delay).
EXPIRE_PERIOD_MS = 1000
#: A queue empty and without a consumer this long is deleted (``gcInactiveDestinations``, as
#: Artemis deletes the queues it created on demand): Classic otherwise keeps every queue it ever
#: created, each costing the node a dispatch pass every ``EXPIRE_PERIOD_MS``, and every test
#: leaves its queues behind. Classic's default of a minute: a queue still in use is not
#: deleted, and one deleted comes back, empty, with its next consumer or message.
INACTIVE_QUEUE_GC_MS = 60_000
#: How often a node looks for queues to delete (``schedulePeriodForDestinationPurge``; 0, never,
#: by default).
DESTINATION_PURGE_MS = 15_000
#: Percent of ``memoryUsage`` up to which a queue keeps newly stored persistent messages in
#: memory as well (Classic's default 70). Classic charges a small STOMP message about a third of
#: what it takes on the heap, so with the default a backlog of 256-byte messages filled each
#: 512 MiB heap at 145,000 messages per node, still below the mark, and every broker stalled in
#: GC while a million were produced (docs/broker-behaviour.md, "A backlog cached past the heap").
#: Above the mark messages stay in the store and are paged in for dispatch.
CURSOR_HIGH_WATER_MARK = 20

# What bin/activemq passes on Java 9+: XStream (map-message transformation), JMX and the
# console reflect into these JDK packages.
JAVA_MODULE_FLAGS = [
    "--add-reads=java.xml=java.logging",
    "--add-opens", "java.base/java.security=ALL-UNNAMED",
    "--add-opens", "java.base/java.net=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "--add-opens", "java.naming/javax.naming.spi=ALL-UNNAMED",
    "--add-opens", "java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.http=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.https=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.jar=ALL-UNNAMED",
    "--add-exports=jdk.xml.dom/org.w3c.dom.html=ALL-UNNAMED",
    "--add-exports=jdk.naming.rmi/com.sun.jndi.url.rmi=ALL-UNNAMED",
]

# DemandForwardingBridgeSupport / DiscoveryNetworkConnector log, for this node's bridge to a peer:
#   "Network connection between vm://node0#6 and tcp:///127.0.0.1:41235@37840 (node1) has been established."
#   "Network connection between vm://node0#6 and tcp:///127.0.0.1:41235@37840 shutdown due to a remote error: ..."
#   "node0 bridge to node1 stopped"          (also "bridge to Unknown" while a peer is still down)
#   "node0 Shutting down node0-to-node1"     (connector name, logged on every failed attempt)
_BRIDGE_UP = re.compile(
    r"Network connection between vm://(?P<local>[^#\s]+)#\d+ and \S+ \((?P<peer>[^)]+)\) has been established"
)
_BRIDGE_DOWN_PORT = re.compile(
    r"Network connection between vm://(?P<local>[^#\s]+)#\d+ and tcp://\S*?:(?P<port>\d+)@\d+ shutdown"
)
_BRIDGE_DOWN_NAME = re.compile(
    r"\| (?P<local>\S+) (?:bridge to (?P<peer>\S+) stopped|Shutting down (?P=local)-to-(?P<peer2>\S+)) \|"
)


def _ssl_context(cluster: ClusterState) -> str:
    """The ``<sslContext>`` element for a TLS cluster; empty text otherwise."""
    if not cluster.tls:
        return ""
    if not cluster.keystore:
        raise ValueError("TLS cluster without a keystore in its state")
    return render(
        load_template("classic", "ssl-context.xml.tmpl"),
        {
            "keystore_url": xml_attr(Path(cluster.keystore).as_uri()),
            "keystore_password": xml_attr(keystore_password(cluster.password)),
        },
    ).rstrip("\n")


class ClassicFlavor(BrokerFlavor):
    """ActiveMQ Classic network of brokers, full mesh over OpenWire."""

    name = "classic"

    def ensure_home(self, progress: Progress | None = None) -> tuple[Path, str]:
        return distribution_home("classic"), CLASSIC_VERSION

    def jms_client(self, cluster: ClusterState, node: NodeState, run: JmsClientRun) -> list[str]:
        """``activemq.jar producer|consumer`` over OpenWire (the node's peer port), started as
        ``bin/activemq`` would but without the script, which re-splits its arguments (a quoted
        selector lost its quotes); a selector goes in the destination's ``consumer.selector``
        option (the CLI has no flag for it)."""
        home = Path(cluster.home)
        destination = run.destination + (f"?consumer.selector={run.selector}" if run.selector else "")
        argv = [process.java_executable(), "-Xmx256m", *JAVA_MODULE_FLAGS,
                *process.system_properties({"java.io.tmpdir": run.work,
                                            **_activemq_dirs(home, home, home / "conf", run.work)}),
                "-jar", str(home / "bin" / "activemq.jar"), run.role,
                "--brokerUrl", f"tcp://{node.host}:{node.peer_port}", "--user", cluster.username,
                "--password", cluster.password, "--destination", destination,
                "--messageCount", str(run.count)]
        if run.role == "producer":
            argv += ["--persistent", "true"]
            argv += ["--msgGroupID", run.group] if run.group else []
            argv += ["--messageSize", str(run.body_size)] if run.body_size else []
        return argv

    def render_config(self, cluster: ClusterState, node: NodeState, node_dir: Path) -> None:
        conf = node_dir / "conf"
        for sub in ("conf", "data", "tmp"):
            (node_dir / sub).mkdir(parents=True, exist_ok=True)
        connector_tmpl = load_template("classic", "network-connector.xml.tmpl")
        paired = is_paired(cluster)
        connectors = [
            render(
                connector_tmpl,
                {
                    "broker_name": xml_attr(node.name),
                    "peer_name": xml_attr(peer.name),
                    "peer_openwire_port": peer.peer_port,
                    "max_reconnect_delay_ms": MAX_RECONNECT_DELAY_MS,
                    "bridge_inactivity_ms": BRIDGE_INACTIVITY_MS,
                    "username": xml_attr(cluster.username),
                    "password": xml_attr(cluster.password),
                    # a node added to a running cluster: the old nodes have no connector to it
                    "duplex": "true" if node.joined else "false",
                },
            ).rstrip("\n") if not paired else self._pair_connector(cluster, node, peer.index)
            for peer in cluster.nodes
            if peer.name != node.name and peer.backup_of is None
        ]
        broker_xml = render(
            load_template("classic", "activemq.xml.tmpl"),
            {
                "broker_name": xml_attr(node.name),
                "broker_id": xml_attr(broker_id(cluster, node)),
                "data_dir": xml_attr(node_dir / "data"),
                # The broker empties its temp-store directory on start: give it its own sub-directory
                # so java.io.tmpdir (the parent) survives.
                "tmp_dir": xml_attr(node_dir / "tmp" / "broker"),
                "kahadb_dir": xml_attr(kahadb_dir(node, node_dir)),
                "kahadb_locker": (
                    f'<locker><shared-file-locker lockAcquireSleepInterval="{LOCK_ACQUIRE_SLEEP_MS}"/></locker>'
                    if paired else ""
                ),
                "network_connectors": "\n".join(connectors),
                "username": xml_attr(cluster.username),
                "password": xml_attr(cluster.password),
                "memory_percent_of_heap": MEMORY_PERCENT_OF_HEAP,
                "store_limit": STORE_LIMIT,
                "temp_limit": TEMP_LIMIT,
                "openwire_port": node.peer_port,
                "stomp_port": node.stomp_port,
                "amqp_port": node.amqp_port,
                "stomp_scheme": "stomp+nio+ssl" if cluster.tls else "stomp+nio",
                "ssl_context": _ssl_context(cluster),
                "max_frame_size": MAX_FRAME_SIZE,
                "bridge_inactivity_ms": BRIDGE_INACTIVITY_MS,
                "max_page_size": MAX_PAGE_SIZE,
                "max_audit_depth": MAX_AUDIT_DEPTH,
                "dispatch_start_ms": DISPATCH_START_MS,
                "cursor_high_water_mark": CURSOR_HIGH_WATER_MARK,
                "replay_delay_ms": REPLAY_DELAY_MS,
                "expire_period_ms": EXPIRE_PERIOD_MS,
                "inactive_queue_gc_ms": INACTIVE_QUEUE_GC_MS,
                "destination_purge_ms": DESTINATION_PURGE_MS,
            },
        )
        write_file(conf / "activemq.xml", broker_xml)
        write_file(conf / "log4j2.properties", load_template("classic", "log4j2.properties.tmpl"))

    @staticmethod
    def _pair_connector(cluster: ClusterState, node: NodeState, peer: int) -> str:
        """A bridge to a failover pair: ``masterslave:`` tries its members in order."""
        opts = f"?wireFormat.maxInactivityDuration={BRIDGE_INACTIVITY_MS}"
        group = members(cluster, peer)
        return render(
            load_template("classic", "network-connector-pair.xml.tmpl"),
            {
                "broker_name": xml_attr(node.name),
                "peer_name": xml_attr(group[0].name),
                "peer_uris": xml_attr(",".join(f"tcp://127.0.0.1:{m.peer_port}{opts}" for m in group)),
                "username": xml_attr(cluster.username),
                "password": xml_attr(cluster.password),
            },
        ).rstrip("\n")

    def command(self, cluster: ClusterState, node: NodeState, node_dir: Path) -> list[str]:
        home = Path(cluster.home)
        conf = node_dir / "conf"
        return [
            *process.broker_jvm(HEAP_MIN, HEAP_MAX, JAVA_MODULE_FLAGS, node_dir, {
                "java.io.tmpdir": node_dir / "tmp", "log4j2.configurationFile": conf / "log4j2.properties",
                **_activemq_dirs(home, node_dir, conf, node_dir / "data"),
            }),
            "-jar", str(home / "bin" / "activemq.jar"), "start", f"xbean:file:{conf / 'activemq.xml'}",
        ]

    def connected_peers(self, cluster: ClusterState, node: NodeState, log_text: str) -> set[str] | None:
        """Replay the node's bridge log lines since its start; the last event per peer wins."""
        by_port = {peer.peer_port: peer.name for peer in cluster.nodes}
        names = set(by_port.values())
        up: dict[str, bool] = {}
        for line in log_text.splitlines():
            if "Network connection between" not in line and "| " + node.name + " " not in line:
                continue
            match = _BRIDGE_UP.search(line)
            if match and match.group("local") == node.name:
                up[match.group("peer")] = True
                continue
            match = _BRIDGE_DOWN_PORT.search(line)
            if match and match.group("local") == node.name:
                peer = by_port.get(int(match.group("port")))
                if peer:
                    up[peer] = False
                continue
            match = _BRIDGE_DOWN_NAME.search(line)
            if match and match.group("local") == node.name:
                up[match.group("peer") or match.group("peer2")] = False
        return {peer for peer, is_up in up.items() if is_up and peer in names}


def broker_id(cluster: ClusterState, node: NodeState) -> str:
    """The broker id a node keeps across restarts and failovers, shared by a pair's members.

    A bridge does not send a queue message back to a broker in its broker path while the node
    has a consumer of its own, and the path holds broker ids, which Classic otherwise draws anew
    at every start. A pair's new master (or a restarted node) was then a stranger to what its
    predecessor had forwarded: the peer sent those messages straight back to it (49 of 50 in
    ``test_pairs.py::test_a_new_master_is_the_same_broker_to_the_network``), and a message both
    nodes held crossed in both directions, each node dropped the copy that arrived as a duplicate
    and deleted its own on the other's acknowledgement (21 of 6,000 lost in one CI run;
    docs/broker-behaviour.md, "Two nodes that swap copies of one message").
    """
    first = members(cluster, logical_index(node))[0]
    return f"clustermq-{first.name}-{first.peer_port}"


def kahadb_dir(node: NodeState, node_dir: Path) -> Path:
    """Where a node's KahaDB journal and index live (a failover pair's members share one)."""
    return store_dir(node, node_dir) / "data" / "kahadb"


def _activemq_dirs(home: Path, base: Path, conf: Path, data: Path) -> dict[str, Path]:
    """The system properties by which ``activemq.jar`` finds its install, its configuration
    and its data, as ``bin/activemq`` sets them (a broker and a JMS client alike)."""
    return {"activemq.classpath": conf, "activemq.home": home, "activemq.base": base,
            "activemq.conf": conf, "activemq.data": data}
