"""Artemis-only behaviour, against the live 3-node Artemis cluster of the session (no mocks).

The reader, writer and pipeline suites already run on both flavors (``conftest.cluster`` is
parametrised by ``CLUSTERMQ_FLAVORS``); this module covers what only Artemis has: the cluster
configuration the issue asks for, the acceptance run, redistribution of a departed consumer's
messages, and the broker's own duplicate detection of the writer's ``_AMQ_DUPL_ID``.
Every wait is a poll with a deadline.
"""

from __future__ import annotations

import queue as queue_mod
import re
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pytest
import stomp

from conftest import cluster_flavors
from waits import poll

F = TypeVar("F", bound=Callable[..., Any])


def ON_ARTEMIS(test: F) -> F:
    """Run ``test`` on the session's Artemis cluster (shared with the other modules), marked
    ``cluster``; skipped when ``CLUSTERMQ_FLAVORS`` leaves Artemis out."""
    marks = [
        pytest.mark.cluster,
        pytest.mark.skipif("artemis" not in cluster_flavors(), reason="CLUSTERMQ_FLAVORS excludes artemis"),
        pytest.mark.parametrize("cluster", ["artemis"], indirect=True),
    ]
    for mark in marks:
        test = mark(test)
    return test


def new_queue(tag: str) -> str:
    return f"test.artemis.{tag}.{uuid.uuid4().hex[:8]}"


class Frames(stomp.ConnectionListener):
    """Frames from stomp.py's receiver thread, for the test's thread (which does all sending)."""

    def __init__(self) -> None:
        self.frames: queue_mod.Queue[tuple[str, Any]] = queue_mod.Queue()
        self.connected = threading.Event()

    def on_connected(self, frame: Any) -> None:
        self.connected.set()

    def on_message(self, frame: Any) -> None:
        self.frames.put(("message", frame))

    def on_receipt(self, frame: Any) -> None:
        self.frames.put(("receipt", frame))

    def on_error(self, frame: Any) -> None:
        self.frames.put(("error", frame))

    def messages(self) -> list[Any]:
        """Every MESSAGE received since the last call."""
        out = []
        while True:
            try:
                kind, frame = self.frames.get_nowait()
            except queue_mod.Empty:
                return out
            if kind == "error":
                raise AssertionError(f"broker ERROR: {frame.headers.get('message')}")
            if kind == "message":
                out.append(frame)


def plain_client(broker: Any, node: int) -> tuple[stomp.Connection12, Frames]:
    """A plain stomp.py connection to one node (no connector code involved)."""
    address = broker.cluster.nodes()[node]
    conn = stomp.Connection12([(address.host, address.port)], auto_decode=False, heartbeats=(0, 0))
    frames = Frames()
    conn.set_listener("frames", frames)
    username, password = broker.cluster.credentials
    conn.connect(username, password, wait=False)
    poll(frames.connected.is_set, 30, f"CONNECTED from node {node}")
    return conn, frames


def subscribe(
    conn: stomp.Connection12, frames: Frames, queue: str, sub_id: str, ack: str, **headers: str
) -> None:
    """SUBSCRIBE with a receipt, so the consumer exists on the broker when this returns.

    ``ack`` is stomp.py's own argument: an ``ack`` inside ``headers`` would be overwritten by
    its default, ``auto``.
    """
    receipt = f"sub-{sub_id}"
    conn.subscribe(queue, id=sub_id, ack=ack,
                   headers={"destination-type": "ANYCAST", "receipt": receipt, **headers})
    deadline = time.monotonic() + 30
    while True:
        kind, frame = frames.frames.get(timeout=max(0.1, deadline - time.monotonic()))
        if kind == "receipt" and frame.headers.get("receipt-id") == receipt:
            return
        frames.frames.put((kind, frame))  # a message that overtook the receipt: keep it


def close(conn: stomp.Connection12) -> None:
    try:
        conn.disconnect()
    except Exception:
        pass


def total_depth(broker: Any, queue: str) -> int:
    return sum(d or 0 for d in broker.depths(queue).values())


# --------------------------------------------------------------------------- the cluster


@ON_ARTEMIS
def test_cluster_is_configured_as_the_issue_asks(broker: Any) -> None:
    from clustermq.devtools.localcluster.artemis_flavor import ArtemisFlavor
    from clustermq.devtools.localcluster.stompprobe import stomp_connect

    cluster = broker.cluster
    state = cluster.state()
    assert state.flavor == "artemis" and len(state.nodes) == 3
    assert all(row["ready"] for row in cluster.status())
    names = {n.name for n in state.nodes}
    for node in state.nodes:
        etc = cluster.node_dir(node.index) / "etc"
        xml = (etc / "broker.xml").read_text()
        for fragment in ("<message-load-balancing>OFF_WITH_REDISTRIBUTION</message-load-balancing>",
                         "<redistribution-delay>1000</redistribution-delay>",
                         "anycastPrefix=/queue/", "<static-connectors>", "<global-max-size>",
                         f"<journal-directory>{cluster.node_dir(node.index)}/data/journal",
                         "<min-disk-free>256MB</min-disk-free>"):
            assert fragment in xml, fragment
        # a percentage limit refused every send on a large disk with 2.1 GB free
        # (docs/broker-behaviour.md, "A nearly full disk")
        assert "<max-disk-usage>" not in xml
        (cluster_password,) = re.findall(r"<cluster-password>([^<]*)</cluster-password>", xml)
        assert cluster_password != "CHANGE ME!!" and len(cluster_password) >= 32
        assert state.password not in xml  # derived from the client password, which is not in it
        for secret in ("broker.xml", "artemis-users.properties"):
            assert stat.S_IMODE((etc / secret).stat().st_mode) == 0o600
        log = cluster.log_since(node.index, node.log_offset)
        assert ArtemisFlavor().connected_peers(state, node, log) == names - {node.name}
    # login is required, and only the cluster's user gets in
    first = state.nodes[0]
    assert stomp_connect(first.host, first.stomp_port, None, None).refused
    assert stomp_connect(first.host, first.stomp_port, state.username, "wrong-password").refused
    assert stomp_connect(first.host, first.stomp_port, state.username, state.password).ok


@ON_ARTEMIS
def test_plain_queue_prefix_routes_anycast_and_depth_per_node(broker: Any) -> None:
    """A plain STOMP client's ``/queue/x`` lands in the anycast queue ``x`` the connector reads."""
    queue = new_queue("prefix")
    conn, _ = plain_client(broker, 1)
    try:
        for i in range(5):
            conn.send(f"/queue/{queue}", f"m{i}", headers={"persistent": "true"})
        conn.send(f"/queue/{queue}", "last", headers={"persistent": "true", "receipt": "r"})
    finally:
        close(conn)
    nodes = [n.name for n in broker.cluster.nodes()]
    expected = {nodes[0]: 0, nodes[1]: 6, nodes[2]: 0}
    # Right after a cluster start the management count of a just auto-created queue can lag
    # the SENDs (CI saw 0 on node 1 once): poll, then assert the exact placement.
    seen: dict = {}

    def placed() -> bool:
        seen.update(broker.depths(queue))
        return seen == expected

    poll(placed, 30, f"depths {expected}")
    assert dict(broker.depths(new_queue("never-used"))) == {n: 0 for n in nodes}


# --------------------------------------------------------------------------- acceptance


@ON_ARTEMIS
@pytest.mark.spark
def test_acceptance_20000_grouped_messages_drained_available_now(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    """Acceptance at scale: 20,000 persistent messages in 100 groups from the plain stomp.py
    load generator, drained by AvailableNow with maxMessagesPerTrigger=3000."""
    from test_reader import drain, loadgen_ids

    queue = new_queue("accept")
    started = time.monotonic()
    produced = broker.produce(queue, 20_000, groups=100)
    produce_s = time.monotonic() - started
    assert sum(produced.values()) == 20_000
    assert total_depth(broker, queue) == 20_000
    started = time.monotonic()
    rows, progress = drain(spark, broker.reader_options(queue, maxMessagesPerTrigger=3000), tmp_path)
    print(f"\nartemis acceptance: produced 20,000 in {produce_s:.1f} s {dict(produced)}, drained in "
          f"{time.monotonic() - started:.1f} s, {len(progress)} batches")
    assert rows.count() == 20_000
    assert rows.select("message_id").distinct().count() == 20_000
    assert sorted(loadgen_ids(rows)) == list(range(20_000))
    sizes = [p["numInputRows"] for p in progress]
    assert max(sizes) <= 3000 and sum(sizes) == 20_000
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


# --------------------------------------------------------------------------- redistribution


@ON_ARTEMIS
def test_messages_of_a_departed_consumer_are_redistributed(broker: Any) -> None:
    """A consumer leaves node 0; node 0's queued messages reach the consumers on nodes 1 and 2."""
    queue = new_queue("redist")
    count = 300
    assert broker.produce(queue, count, nodes=[0]) == {broker.cluster.nodes()[0].name: count}

    leaving, leaving_frames = plain_client(broker, 0)
    stayers = [plain_client(broker, 1), plain_client(broker, 2)]
    try:
        # One message in flight to node 0's consumer, never acknowledged.
        subscribe(leaving, leaving_frames, queue, "leaving", ack="client", **{"consumer-window-size": "1"})
        held = poll(leaving_frames.messages, 30, "a delivery to node 0's consumer")
        assert len(held) == 1
        for i, (conn, frames) in enumerate(stayers):
            subscribe(conn, frames, queue, f"stay{i}", ack="auto")
        # While node 0 has a consumer its messages stay there.
        assert dict(broker.depths(queue))[broker.cluster.nodes()[0].name] == count

        close(leaving)  # the consumer leaves: its unacknowledged message goes back to the queue
        received: list[list[Any]] = [[], []]

        def all_arrived() -> bool:
            for i, (_, frames) in enumerate(stayers):
                received[i].extend(frames.messages())
            return sum(map(len, received)) >= count

        poll(all_arrived, 120, f"{count} redistributed messages on nodes 1 and 2")
        ids = sorted(int(f.headers["loadgen_id"]) for part in received for f in part)
        assert ids == list(range(count))  # every message exactly once
        assert all(len(part) > 0 for part in received), [len(p) for p in received]
    finally:
        for conn, _ in stayers:
            close(conn)
        close(leaving)
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


# --------------------------------------------------------------------------- duplicates


def _bodies(n: int) -> Iterator[pa.RecordBatch]:
    yield pa.RecordBatch.from_arrays([pa.array([f"m{i}" for i in range(n)])], names=["body"])


@ON_ARTEMIS
def test_broker_drops_a_retried_writer_task_by_duplicate_id(broker: Any) -> None:
    """A re-run batch (same job, batch and partition: the same ``clustermq_id``s) is written and
    moved twice; the broker keeps one copy of each, by ``_AMQ_DUPL_ID``."""
    from clustermq.options import WriteOptions
    from clustermq.write.headers import ID_HEADER, staging_queue
    from clustermq.write.layout import InputLayout
    from clustermq.write.modes import JobStaging
    from clustermq.write.staging import StagedTask, move_job
    from clustermq.write.task import TaskIdentity, write_task

    queue = new_queue("dupl")
    count = 500
    username, password = broker.cluster.credentials
    options = WriteOptions.parse({"brokers": broker.cluster.brokers, "queue": queue, "username": username,
                                  "password": password, "loadBalancingPolicy": "firstElement"})
    job = uuid.uuid4().hex
    node0 = broker.cluster.nodes()[0].name
    for attempt in (0, 1):
        message = write_task(options, InputLayout(body="body", body_is_text=True),
                             TaskIdentity(job, 7, 0, attempt), _bodies(count), JobStaging())
        assert message.counts == {0: count}
        moves = move_job(options, job, [StagedTask(message.task_tag, message.counts)], queue)
        assert [(m.node, m.moved, m.error) for m in moves] == [(node0, count, None)]  # sent twice
        assert dict(broker.depths(queue))[node0] == count  # ... kept once
        assert dict(broker.depths(staging_queue(queue, job, 0)))[node0] == 0

    conn, frames = plain_client(broker, 0)
    got: list[Any] = []
    try:
        subscribe(conn, frames, queue, "check", ack="auto")

        def everything() -> bool:
            got.extend(frames.messages())
            return len(got) >= count

        poll(everything, 60, f"{count} messages")
    finally:
        close(conn)
    assert len(got) == count
    ids = {f.headers[ID_HEADER] for f in got}
    assert ids == {f"{job}:7:0:{row}" for row in range(count)}
    assert all(f.headers["_AMQ_DUPL_ID"] == f.headers[ID_HEADER] for f in got)
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


@ON_ARTEMIS
def test_same_duplicate_id_sent_twice_is_one_message(broker: Any) -> None:
    """The broker facts the writer relies on, with a plain client: outside a transaction a second
    SEND with the same ``_AMQ_DUPL_ID`` is dropped (and still gets its RECEIPT); inside one, the
    duplicate fails the whole COMMIT (why the mover sends final copies outside transactions)."""
    queue = new_queue("dupraw")
    node2 = broker.cluster.nodes()[2].name
    headers = {"destination-type": "ANYCAST", "persistent": "true", "_AMQ_DUPL_ID": "same"}

    def receipt(frames: Frames, receipt_id: str) -> Callable[[], bool]:
        return lambda: any(k == "receipt" and f.headers.get("receipt-id") == receipt_id
                           for k, f in list(frames.frames.queue))

    conn, frames = plain_client(broker, 2)
    try:
        conn.send(queue, "first", headers=headers)
        conn.send(queue, "second", headers={**headers, "receipt": "r2"})
        poll(receipt(frames, "r2"), 30, "RECEIPT of the duplicate SEND")
    finally:
        close(conn)
    assert dict(broker.depths(queue))[node2] == 1

    conn, frames = plain_client(broker, 2)
    try:
        tx = conn.begin()
        conn.send(queue, "again", headers=headers, transaction=tx)
        conn.send(queue, "new", headers={**headers, "_AMQ_DUPL_ID": "other"}, transaction=tx)
        conn.commit(tx, headers={"receipt": "c1"})
        errors = poll(lambda: [f for k, f in list(frames.frames.queue) if k == "error"], 30, "ERROR")
        assert "Error committing" in errors[0].headers.get("message", "")
    finally:
        close(conn)
    assert dict(broker.depths(queue))[node2] == 1  # "new" was rolled back with the duplicate


def test_artemis_dialect_refuses_browse_and_reads_its_own_headers() -> None:
    from clustermq.broker.dialect import ArtemisDialect, detect_dialect

    dialect = detect_dialect("ActiveMQ-Artemis/2.40.0 ActiveMQ Artemis Messaging Engine")
    assert isinstance(dialect, ArtemisDialect) and not dialect.transactional_ack
    with pytest.raises(ValueError, match="cannot browse.*draining query"):
        dialect.check_browse()
    assert dialect.destination("orders") == "orders"
    assert dialect.routing_headers() == {"destination-type": "ANYCAST"}
    assert dialect.message_id({"message-id": "156,106"}, "127.0.0.1:61613") == "106@127.0.0.1:61613"
    assert dialect.group_id({"_AMQ_GROUP_ID": "g", "JMSXGroupID": "x"}, "clustermq_group") == "g"
    assert dialect.duplicate_id_headers("job:0:1:2") == {"_AMQ_DUPL_ID": "job:0:1:2"}
    assert dialect.drops_duplicates


def test_bridge_log_lines_give_the_connected_peers() -> None:
    """The readiness mesh check reads Artemis's bridge log lines (formats as logged by 2.40.0)."""
    from clustermq.devtools.localcluster.artemis_flavor import (
        ArtemisFlavor,
        cluster_password,
        properties_escape,
    )
    from clustermq.devtools.localcluster.state import ClusterState, NodeState

    state = ClusterState(flavor="artemis", version="2.40.0", home="/x", username="u", password="p", nodes=[
        NodeState(index=i, name=f"node{i}", host="127.0.0.1", stomp_port=1000 + i, peer_port=2000 + i)
        for i in range(3)
    ])
    sf = "$.artemis.internal.sf.clustermq.d949db61-e5ea-11f1-91aa-02fc0000000{}"

    def connected(peer: int) -> str:
        return (f"2026-11-21T20:33:47,999 INFO  [org.apache.activemq.artemis.core.server] AMQ221027: Bridge "
                f"ClusterConnectionBridge@3fd14eb4 [name={sf.format(peer)}, queue=QueueImpl[name={sf.format(peer)}, "
                f"postOffice=PostOfficeImpl [server=ActiveMQServerImpl::name=node0], temp=false]@5949497f "
                f"targetConnector=ServerLocatorImpl (identity=(Cluster-connection-bridge::ClusterConnectionBridge@"
                f"3fd14eb4 [...] [initialConnectors=[TransportConfiguration(name=self, factory=org-apache-activemq-"
                f"artemis-core-remoting-impl-netty-NettyConnectorFactory)?port={2000 + peer}&host=127-0-0-1], "
                f"discoveryGroupConfiguration=null]]::ClusterConnectionImpl@1066575950[nodeUUID=x, connector="
                f"TransportConfiguration(name=self, factory=f)?port=2000&host=127-0-0-1, address=, server="
                f"ActiveMQServerImpl::name=node0])) [...] is connected")

    retrying = (f"2026-11-21T20:35:30,817 WARN  [org.apache.activemq.artemis.core.server] AMQ224091: Bridge "
                f"ClusterConnectionBridge@3fd14eb4 [name={sf.format(1)}, queue=QueueImpl[name={sf.format(1)}, "
                f"...] is unable to connect to destination. Retrying")
    flavor = ArtemisFlavor()
    node0 = state.nodes[0]
    assert flavor.connected_peers(state, node0, "") == set()
    assert flavor.connected_peers(state, node0, connected(1) + "\n" + connected(2)) == {"node1", "node2"}
    assert flavor.connected_peers(state, node0, "\n".join([connected(1), connected(2), retrying])) == {"node2"}
    assert flavor.connected_peers(state, node0, "\n".join([connected(1), retrying, connected(1)])) == {"node1"}

    assert properties_escape("a=b:c#d\\e") == "a\\=b\\:c\\#d\\\\e"
    assert cluster_password("p") == cluster_password("p") != cluster_password("q")
    assert "p" != cluster_password("p") and len(cluster_password("p")) == 64
