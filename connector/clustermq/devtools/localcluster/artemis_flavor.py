"""ActiveMQ Artemis (2.x) nodes: config rendering, the JVM command line, cluster-bridge state.

Instances are not made with ``artemis create``: every file a node needs (``broker.xml``,
``bootstrap.xml``, ``management.xml``, JAAS ``login.config`` with its users/roles files, ``log4j2.properties``) is
rendered from the package's ``templates/artemis/`` into ``<node dir>/etc``, which is faster, keeps every knob in
the repository, and lets the harness put absolute node paths and dynamic ports straight in. The
node runs as one ``java ... org.apache.activemq.artemis.boot.Artemis run`` process (what the
instance's ``bin/artemis`` script execs), so the recorded pid is the broker itself.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from clustermq.devtools.localcluster import process
from clustermq.devtools.localcluster.broker_flavor import BrokerFlavor, JmsClientRun, Progress
from clustermq.devtools.localcluster.certificates import keystore_password
from clustermq.devtools.localcluster.failover_pairs import is_paired, logical_index, member_label, store_dir
from clustermq.devtools.localcluster.fetch import ARTEMIS_VERSION, distribution_home
from clustermq.devtools.localcluster.state import ClusterState, NodeState
from clustermq.devtools.localcluster.templates import load_template, render, write_file, xml_attr

HEAP_MIN = "128m"
HEAP_MAX = "512m"
# Past this, addresses page to disk: well under the heap, so a burst cannot exhaust it.
GLOBAL_MAX_SIZE = "128M"
# Free bytes on the data directory's disk below which a node blocks producers. An absolute floor,
# not Artemis's percentage (max-disk-usage, default 90): a large disk that is 98.6% full still
# had 1.4 GB free, yet a percentage limit made every send of a development cluster fail with
# AMQ229119 (docs/broker-behaviour.md, "A nearly full disk").
MIN_DISK_FREE = "256MB"
MAX_FRAME_SIZE = 64 * 1024 * 1024
# Cluster bridges retry with back-off up to this delay: a restarted node rejoins within seconds.
MAX_RETRY_INTERVAL_MS = 2000
CLUSTER_USER = "clustermq-cluster"

# What bin/artemis passes on Java 17 (artemis.profile): the journal reflects into jdk.internal.misc.
JAVA_FLAGS = [
    "-XX:+UseG1GC",
    "-XX:AutoBoxCacheMax=20000",
    "-Dlog4j2.disableJmx=true",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
]

# ClusterConnectionBridge logs, for this node's bridge to a peer (the peer named by its port):
#   "AMQ221027: Bridge ClusterConnectionBridge@1a2b [name=$.artemis.internal.sf.clustermq.<id>, ...
#    targetConnector=ServerLocatorImpl (identity=...) [initialConnectors=[TransportConfiguration(
#    name=..., factory=...) ?port=41235&host=127-0-0-1], ...] is connected"
# and, when the peer goes away, "AMQ224091: Bridge ClusterConnectionBridge@1a2b [name=$.artemis.
# internal.sf.clustermq.<id>, ...] is unable to connect to destination. Retrying" (WARN, repeated
# until it is back) or "AMQ221029: stopped bridge $.artemis.internal.sf.clustermq.<id>".
_BRIDGE_CONNECTED = re.compile(r"AMQ221027: Bridge .*?\?port=(?P<port>\d+)&host=\S*? .* is connected")
_SF_NAME = re.compile(r"\$\.artemis\.internal\.sf\.[^.\s]+\.(?P<id>[0-9a-f-]{36})")
_BRIDGE_STOPPED = re.compile(r"AMQ221029: stopped bridge (?P<name>\S+)")
_BRIDGE_RETRYING = re.compile(r"AMQ224091: Bridge (?P<rest>.*)")


def cluster_password(password: str) -> str:
    """The nodes' shared ``cluster-password``: derived from the client password, never the default.

    Derived rather than stored so ``cluster.json`` keeps one secret; hashed so the client
    password cannot be read back from a node's ``broker.xml`` cluster section.
    """
    return hashlib.sha256(("clustermq-artemis-cluster:" + password).encode()).hexdigest()


def properties_escape(value: str) -> str:
    """Escape ``value`` for a Java ``.properties`` key or value (JAAS users/roles files)."""
    out = []
    for i, ch in enumerate(value):
        if ch in "\\=:#!" or (ch == " " and i == 0):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        else:
            out.append(ch)
    return "".join(out)


def _stomp_tls_params(cluster: ClusterState) -> str:
    """Extra STOMP acceptor parameters for a TLS cluster (``;sslEnabled=true;...``), else empty."""
    if not cluster.tls:
        return ""
    if not cluster.keystore:
        raise ValueError("TLS cluster without a keystore in its state")
    params = {
        "sslEnabled": "true",
        "keyStorePath": cluster.keystore,
        "keyStorePassword": keystore_password(cluster.password),
        "keyStoreType": "PKCS12",
    }
    return xml_attr("".join(f";{key}={value}" for key, value in params.items()))


class ArtemisFlavor(BrokerFlavor):
    """ActiveMQ Artemis symmetric cluster over static connectors."""

    name = "artemis"

    def ensure_home(self, progress: Progress | None = None) -> tuple[Path, str]:
        return distribution_home("artemis"), ARTEMIS_VERSION

    def jms_client(self, cluster: ClusterState, node: NodeState, run: JmsClientRun) -> list[str]:
        """``bin/artemis producer|consumer`` over CORE (the node's cluster acceptor)."""
        argv = [str(Path(cluster.home) / "bin" / "artemis"), run.role, "--silent",
                "--url", f"tcp://{node.host}:{node.peer_port}", "--user", cluster.username,
                "--password", cluster.password, "--destination", run.destination,
                "--message-count", str(run.count)]
        if run.role == "producer":
            argv += ["--group", run.group] if run.group else []
            argv += ["--message-size", str(run.body_size)] if run.body_size else []
        argv += ["--filter", run.selector] if run.selector else []
        return argv

    def render_config(self, cluster: ClusterState, node: NodeState, node_dir: Path) -> None:
        etc = node_dir / "etc"
        for sub in ("etc", "data", "tmp", "log"):
            (node_dir / sub).mkdir(parents=True, exist_ok=True)
        peers = [peer for peer in cluster.nodes if peer.index != node.index]
        peer_connectors = "\n".join(
            f'      <connector name="{xml_attr(member_label(peer))}">tcp://127.0.0.1:{peer.peer_port}</connector>'
            for peer in peers
        )
        static_connectors = "\n".join(
            f"          <connector-ref>{xml_attr(member_label(peer))}</connector-ref>" for peer in peers
        )
        # A cluster connection needs at least one static connector: a 1-node cluster has none.
        cluster_connections = ""
        if peers:
            cluster_connections = render(
                load_template("artemis", "cluster-connection.xml.tmpl"),
                {"static_connectors": static_connectors, "max_retry_interval_ms": MAX_RETRY_INTERVAL_MS},
            ).rstrip("\n")
        # Scale-down (``cluster up --scale-down``): a node stopped gracefully hands its messages
        # to the first peer it reaches before it exits.
        ha_policy = ""
        if peers and cluster.scale_down:
            refs = static_connectors.replace("          <connector-ref>", "              <connector-ref>")
            ha_policy = ("    <ha-policy>\n      <primary-only>\n        <scale-down>\n"
                         f"          <connectors>\n{refs}\n          </connectors>\n"
                         "        </scale-down>\n      </primary-only>\n    </ha-policy>")
        broker_xml = render(
            load_template("artemis", "broker.xml.tmpl"),
            {
                "broker_name": xml_attr(node.name),
                "data_dir": xml_attr(store_dir(node, node_dir) / "data"),
                "global_max_size": GLOBAL_MAX_SIZE,
                "min_disk_free": MIN_DISK_FREE,
                "cluster_user": xml_attr(CLUSTER_USER),
                "cluster_password": xml_attr(cluster_password(cluster.password)),
                "peer_port": node.peer_port,
                "stomp_port": node.stomp_port,
                "amqp_port": node.amqp_port,
                "stomp_tls": _stomp_tls_params(cluster),
                "max_frame_size": MAX_FRAME_SIZE,
                "peer_connectors": peer_connectors,
                "cluster_connections": cluster_connections,
                "ha_policy": self._ha_policy(cluster, node) or ha_policy,
            },
        )
        write_file(etc / "broker.xml", broker_xml)
        write_file(
            etc / "bootstrap.xml",
            render(
                load_template("artemis", "bootstrap.xml.tmpl"),
                {"broker_name": xml_attr(node.name), "broker_xml_uri": xml_attr((etc / "broker.xml").as_uri())},
            ),
        )
        write_file(
            etc / "login.config",
            render(
                load_template("artemis", "login.config.tmpl"),
                # Relative names: PropertiesLoginModule resolves them against the directory of
                # login.config and mangles absolute ones (it prefixes that directory anyway).
                {"users_file": "artemis-users.properties", "roles_file": "artemis-roles.properties"},
            ),
        )
        user = properties_escape(cluster.username)
        write_file(
            etc / "artemis-users.properties",
            render(load_template("artemis", "artemis-users.properties.tmpl"),
                   {"username": user, "password": properties_escape(cluster.password)}),
        )
        write_file(
            etc / "artemis-roles.properties",
            render(load_template("artemis", "artemis-roles.properties.tmpl"), {"username": user}),
        )
        write_file(etc / "log4j2.properties", load_template("artemis", "log4j2.properties.tmpl"))
        write_file(etc / "management.xml", load_template("artemis", "management.xml.tmpl"))

    @staticmethod
    def _ha_policy(cluster: ClusterState, node: NodeState) -> str:
        """Shared-store HA for a member of a pair: the first member primary, the others backups."""
        if not is_paired(cluster):
            return ""
        role = (
            "        <primary><failover-on-shutdown>true</failover-on-shutdown></primary>"
            if node.backup_of is None
            else "        <backup><allow-failback>false</allow-failback></backup>"
        )
        return render(load_template("artemis", "ha-policy.xml.tmpl"), {"role": role}).rstrip("\n")

    def command(self, cluster: ClusterState, node: NodeState, node_dir: Path) -> list[str]:
        home = Path(cluster.home)
        etc = node_dir / "etc"
        return [
            *process.broker_jvm(HEAP_MIN, HEAP_MAX, JAVA_FLAGS, node_dir, {
                "java.security.auth.login.config": etc / "login.config",
                "log4j2.configurationFile": (etc / "log4j2.properties").as_uri(),
                "artemis.home": home, "artemis.instance": node_dir, "artemis.instance.etc": etc,
                "java.io.tmpdir": node_dir / "tmp", "data.dir": node_dir / "data",
            }),
            "-classpath", str(home / "lib" / "artemis-boot.jar"),
            "org.apache.activemq.artemis.boot.Artemis", "run",
        ]

    def connected_peers(self, cluster: ClusterState, node: NodeState, log_text: str) -> set[str] | None:
        """Replay the node's bridge log lines since its start; the last event per peer wins.

        A bridge is connected when AMQ221027 names the peer's cluster port; it is down when
        AMQ224091 (retrying) or AMQ221029 (stopped) names the store-and-forward queue that the
        connected bridge used.
        """
        by_port = {peer.peer_port: peer.name for peer in cluster.nodes
                   if logical_index(peer) != logical_index(node)}
        up: dict[str, bool] = {}
        sf_owner: dict[str, str] = {}
        for line in log_text.splitlines():
            if "AMQ221027" not in line and "AMQ221029" not in line and "AMQ224091" not in line:
                continue
            match = _BRIDGE_RETRYING.search(line)
            if match:
                sf = _SF_NAME.search(match.group("rest"))
                peer = sf_owner.get(sf.group("id")) if sf else None
                if peer:
                    up[peer] = False
                continue
            match = _BRIDGE_CONNECTED.search(line)
            if match:
                peer = by_port.get(int(match.group("port")))
                if peer:
                    up[peer] = True
                    sf = _SF_NAME.search(line)
                    if sf:
                        sf_owner[sf.group("id")] = peer
                continue
            match = _BRIDGE_STOPPED.search(line)
            if match:
                sf = _SF_NAME.search(match.group("name"))
                peer = sf_owner.get(sf.group("id")) if sf else None
                if peer:
                    up[peer] = False
        return {peer for peer, is_up in up.items() if is_up}
