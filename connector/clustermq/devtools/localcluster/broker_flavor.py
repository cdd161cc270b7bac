"""What the cluster harness needs to know about one kind of broker.

``LocalCluster`` is flavor-neutral: ports, processes, state, readiness polling and teardown are
the same for every broker. A flavor supplies the rest: where its distribution comes from, how a
node's config is rendered, the command line that starts a node, and how to tell that the node is
connected to its peers. ActiveMQ Classic and Artemis are the flavors.
"""

from __future__ import annotations

import ssl
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clustermq.devtools.localcluster.state import ClusterState, NodeState
from clustermq.devtools.localcluster.stompprobe import ProbeResult, stomp_connect

Progress = Callable[[str], None]


@dataclass(frozen=True)
class JmsClientRun:
    """One run of a distribution's JMS command-line client.

    A producer sends ``count`` persistent messages to ``queue`` (``group``: JMSXGroupID;
    ``body_size``: BytesMessages of that size, else TextMessages "test message: <i>"); a
    consumer reads ``count`` messages (``selector``: a JMS selector) and ends. ``work`` holds
    what the client writes (logs, temporary files).
    """

    role: str  # "producer" or "consumer"
    queue: str
    count: int
    work: Path
    group: str | None = None
    body_size: int = 0
    selector: str | None = None
    #: ``queue`` names a topic: the client publishes to ``topic://<queue>`` (a consumer would
    #: read it through a non-durable subscription)
    topic: bool = False

    @property
    def destination(self) -> str:
        """The client's ``--destination``."""
        return f"{'topic' if self.topic else 'queue'}://{self.queue}"


class BrokerFlavor(ABC):
    """One broker product. Subclasses are stateless; all state lives in ``ClusterState``."""

    name: str = ""

    @abstractmethod
    def ensure_home(self, progress: Progress | None = None) -> tuple[Path, str]:
        """Locate the distribution (``clustermq cluster fetch`` fetches it); return (home directory, version)."""

    @abstractmethod
    def render_config(self, cluster: ClusterState, node: NodeState, node_dir: Path) -> None:
        """Write the node's configuration under ``node_dir`` (creating data/tmp dirs too)."""

    @abstractmethod
    def command(self, cluster: ClusterState, node: NodeState, node_dir: Path) -> list[str]:
        """The argv that runs the node's broker in the foreground as a single process.

        It must contain ``process.marker_arg(node_dir)`` so the pid can be verified later.
        """

    def probe_ready(self, cluster: ClusterState, node: NodeState, timeout: float) -> ProbeResult:
        """Whether the node accepts a STOMP CONNECT with the cluster credentials."""
        return stomp_connect(
            node.host, node.stomp_port, cluster.username, cluster.password, timeout,
            tls=client_tls_context(cluster),
        )

    def jms_client(self, cluster: ClusterState, node: NodeState, run: JmsClientRun) -> list[str]:
        """argv of the distribution's own JMS client on the node's port for JMS clients:
        foreign traffic, as a JMS application makes it."""
        raise NotImplementedError(f"no JMS client for {self.name}")

    def connected_peers(self, cluster: ClusterState, node: NodeState, log_text: str) -> set[str] | None:
        """Names of the peers this node currently forwards to, judged from its log since start.

        ``None`` means the flavor cannot tell; the harness then skips waiting for the mesh.
        """
        return None


def client_tls_context(cluster: ClusterState) -> ssl.SSLContext | None:
    """A client context that trusts the cluster's CA (host names verified); ``None`` without TLS."""
    if not cluster.tls:
        return None
    return ssl.create_default_context(cafile=cluster.ca_file)

