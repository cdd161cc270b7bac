"""Membership without brokers: option parsing, transport URIs, the watch's bookkeeping, the
streaming writer's node list per batch."""

from __future__ import annotations

import pickle
import threading
import time

import pytest

from clustermq.broker.dialect.classic_dialect import _port_of
from clustermq.broker.nodes import Node
from clustermq.errors import MoveError
from clustermq.options import ReadOptions, WriteOptions, parse_connection_options
from clustermq.read.membership import MembershipWatch
from clustermq.write.layout import InputLayout
from clustermq.write.spark import ClusterMQStreamWriter, batch_options
from clustermq.write.task import ClusterMQCommitMessage


def test_discovery_is_off_by_default_and_partitions_follow_the_discovered_nodes_unless_set() -> None:
    base = {"brokers": "mq1:61613", "queue": "orders"}
    assert ReadOptions.parse(base).discovery == "none"
    assert WriteOptions.parse({**base, "discovery": "CLUSTER"}).discovery == "cluster"
    assert ReadOptions.parse({**base, "discovery": "cluster"}).partitions_per_node
    assert not ReadOptions.parse({**base, "discovery": "cluster", "numpartitions": "4"}).partitions_per_node


def test_ports_of_classic_transport_uris() -> None:
    assert _port_of("tcp://localhost:37971?maximumConnections=1000&wireFormat.maxFrameSize=1") == 37971
    assert _port_of("stomp+nio://0.0.0.0:61613") == 61613
    assert _port_of("vm://node0") is None
    assert _port_of("") is None


class _Subscription:
    """Stands in for a node subscription: records what the watch does with it."""

    def __init__(self, node: Node, index: int) -> None:
        self.node, self.index = node, index
        self.started = self.stopped = False
        self.connected, self.departed = True, False

    def connect_once(self) -> None:
        pass

    def set_departed(self, gone: bool) -> None:
        self.departed = gone

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.stopped = True


def test_the_watch_numbers_joined_nodes_after_the_known_ones_and_hands_each_over_once(monkeypatch) -> None:
    conn = parse_connection_options({"brokers": "h:1", "queue": "q"})
    known = ["h:1", "h:2"]
    found = [(Node("h", 1), Node("h", 2), Node("h", 3))]
    monkeypatch.setattr("clustermq.read.membership.published", lambda _conn: found[0])
    watch = MembershipWatch(conn, lambda: list(known), _Subscription)  # type: ignore[arg-type]
    assert [n.name for n in watch.refresh()] == ["h:3"]
    assert watch.refresh() == []  # subscribed, not yet taken: not joined twice
    joined = watch.take_joined()
    assert [(s.node.name, s.index, s.started) for s in joined] == [("h:3", 2, True)]
    known.append("h:3")
    found[0] = (*found[0], Node("h", 4))
    watch.refresh()
    assert [(s.node.name, s.index) for s in watch.take_joined()] == [("h:4", 3)]
    assert watch.take_joined() == []
    watch.stop()
    # never started here: refresh() ran on this thread, and stop() needs no thread either
    assert "clustermq-membership" not in {t.name for t in threading.enumerate()}


def test_a_node_joins_only_a_cluster_of_two_or_more(tmp_path) -> None:
    import pytest

    from clustermq.devtools.localcluster.cluster import LocalCluster
    from clustermq.devtools.localcluster.state import ClusterState, NodeState

    ClusterState(flavor="artemis", version="x", home=str(tmp_path), username="u", password="p",
                 nodes=[NodeState(index=0, name="node0", host="127.0.0.1", stomp_port=1, peer_port=2)]
                 ).save(tmp_path)
    with pytest.raises(ValueError, match="at least 2 nodes"):
        LocalCluster(tmp_path).add_node()
    assert len(ClusterState.load(tmp_path).nodes) == 1  # type: ignore[union-attr]


def test_an_unlisted_node_departs_while_not_connected_and_returns_when_listed(monkeypatch) -> None:
    """Seeds never depart; a connected node is not departed whatever the cluster lists."""
    conn = parse_connection_options({"brokers": "h:1,h:2,h:3", "queue": "q"})
    subs = [_Subscription(n, i) for i, n in enumerate(conn.nodes)]
    listed = [(Node("h", 1),)]
    monkeypatch.setattr("clustermq.read.membership.published", lambda _conn: listed[0])
    watch = MembershipWatch(conn, lambda: [s.node.name for s in subs], _Subscription,  # type: ignore[arg-type]
                            conn.nodes[:1], lambda: subs)  # type: ignore[arg-type,return-value]
    subs[0].connected = subs[2].connected = False
    watch.refresh()
    assert [s.departed for s in subs] == [False, False, True]
    listed[0] = (Node("h", 1), Node("h", 3))
    watch.refresh()
    assert [s.departed for s in subs] == [False, False, False]
    monkeypatch.setattr("clustermq.read.membership.published", lambda _conn: None)
    subs[1].connected = False
    watch.refresh()  # no answer: nothing departs
    assert not any(s.departed for s in subs)


def _task(nodes: tuple[Node, ...]) -> ClusterMQCommitMessage:
    return ClusterMQCommitMessage(job_id="q", batch_id=3, partition=0, attempt=0, task_tag="t", rows=1,
                                  counts={0: 1}, unavailable={}, seconds=0.1, nodes=nodes)


def test_a_streaming_commit_moves_by_the_node_list_its_tasks_published_by() -> None:
    options = WriteOptions.parse({"brokers": "mq1:61613", "queue": "orders", "discovery": "cluster"})
    seen = (Node("mq1", 61613), Node("mq3", 61613), Node("mq2", 61613))
    assert batch_options(options, [_task(seen), _task(seen)]).connection.nodes == seen
    assert batch_options(options, [_task(())]) is options  # a task from before node lists were sent
    with pytest.raises(MoveError, match="different node lists"):
        batch_options(options, [_task(seen), _task(seen[:2])])


def test_a_stream_writer_without_discovery_pickles_its_options_unchanged() -> None:
    options = WriteOptions.parse({"brokers": "mq1:61613,mq2:61613", "queue": "orders"})
    writer = ClusterMQStreamWriter(options, InputLayout(body="body", body_is_text=True))
    assert pickle.loads(pickle.dumps(writer)).options == options


def test_a_relisted_node_is_tried_at_once_with_its_back_off_started_over() -> None:
    """A node the cluster lists again is up: its next connection attempt must not wait out the
    back-off its outage grew (here 20 s after two failed attempts), and the back-off starts
    over from ``initialReconnectDelay``."""
    from clustermq.errors import NodeUnavailable
    from clustermq.read.subscription import NodeSubscription
    from waits import wait_for

    options = ReadOptions.parse({"brokers": "h:1", "queue": "q", "initialReconnectDelay": "200",
                                 "backOffMultiplier": "10", "maxReconnectDelay": "60000"})
    attempts: list[float] = []

    def refused(owner: object, generation: int) -> object:
        attempts.append(time.monotonic())
        raise NodeUnavailable(options.connection.nodes[0], "refused", "refused")

    sub = NodeSubscription(options.connection.nodes[0], 0, options, iter(range(10**6)), lambda n: None,
                       open_link=refused)  # type: ignore[arg-type]
    sub.start()
    try:
        wait_for(lambda: len(attempts) >= 2, 10, "two attempts 0.2 s and 2 s apart")
        sub.set_departed(True)
        relisted = time.monotonic()
        sub.set_departed(False)
        wait_for(lambda: len(attempts) >= 3, 10,
                 "an attempt soon after the node was listed again (the back-off had reached 20 s)")
        assert attempts[2] - relisted < 5, attempts
        wait_for(lambda: len(attempts) >= 4, 10, "the attempt after it")
        assert attempts[3] - attempts[2] < 1.5, ("back-off not started over", attempts)
    finally:
        sub.stop()
