"""The persisted description of a local cluster (``<dir>/cluster.json``).

Everything another process needs to find, query and stop the cluster lives here: flavor, ports,
pids and the credentials. The file holds the cluster password, so it is written with mode 600,
and always by atomic rename so a concurrent reader never sees half a file.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_FILE = "cluster.json"
FORMAT_VERSION = 1


@dataclass
class NodeState:
    """One broker node: its ports, and its process when running."""

    index: int
    name: str  # broker name, unique in the cluster: node0, node1, ...
    host: str
    stomp_port: int
    peer_port: int  # the port other nodes connect to (OpenWire on Classic)
    pid: int | None = None
    log_offset: int = 0  # size of broker.log when the current process was started
    started_at: float | None = None  # time.time() of the current process's start
    joined: bool = False  # added to a running cluster (``cluster add``), not started with it
    # A standby member of a failover pair: the index of the node it backs up (same broker name,
    # same store); None for a node of the network itself.
    backup_of: int | None = None
    # AMQP 1.0 port, for the reader's opt-in ``transport=amqp`` (0: a cluster made before it)
    amqp_port: int = 0


@dataclass
class ClusterState:
    """A whole cluster as recorded on disk."""

    flavor: str
    version: str
    home: str  # the broker distribution the nodes run from
    username: str
    password: str
    nodes: list[NodeState] = field(default_factory=list)
    format: int = FORMAT_VERSION
    # STOMP over TLS (``cluster up --tls``): the CA clients pass as ``sslCaFile`` and the brokers'
    # PKCS12 keystore. Its password is derived from ``password``, never stored on its own.
    tls: bool = False
    ca_file: str | None = None
    keystore: str | None = None
    # Artemis nodes stopped gracefully scale down to a peer (``cluster up --scale-down``)
    scale_down: bool = False

    def save(self, directory: Path) -> None:
        """Atomically write ``directory/cluster.json`` with mode 600."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / STATE_FILE
        tmp = directory / f".{STATE_FILE}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(asdict(self), handle, indent=2)
            handle.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    @classmethod
    def load(cls, directory: Path) -> ClusterState | None:
        """Read ``directory/cluster.json``; ``None`` when there is none."""
        path = directory / STATE_FILE
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        if raw.get("format") != FORMAT_VERSION:
            raise ValueError(f"{path}: unsupported state format {raw.get('format')!r}")
        nodes = [NodeState(**node) for node in raw.pop("nodes")]
        return cls(nodes=nodes, **raw)
