"""Clusters that change while queries run: nodes that join, discovery from a seed, a changed
``brokers`` list across restarts, nodes that leave.

These tests add and stop nodes, so they run on their own small cluster per flavor (module
scope), never on the session's: a 2-node cluster to which the join test adds a third.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from clustermq.broker.discovery import discover
from clustermq.devtools.localcluster.cluster import LocalCluster
from conftest import Broker, cluster_flavors
from test_reader import BRIDGE_COPIES, drain, loadgen_ids, new_queue, python_stderr_to, start_collecting
from waits import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.spark]


@pytest.fixture(scope="module", params=cluster_flavors())
def members(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A 2-node cluster of the parametrised flavor, only for this module (nodes are added and
    stopped); Artemis nodes scale down to their peers when stopped gracefully."""
    local = LocalCluster(tmp_path_factory.mktemp(f"members-{request.param}"))
    try:
        local.up(nodes=2, flavor=request.param, scale_down=True)
        yield Broker(local)
    finally:
        local.down()


def _offsets(checkpoint: Path) -> dict[str, int]:
    """The source offsets of the checkpoint's last batch."""
    latest = max((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    return json.loads(latest.read_text().splitlines()[-1])


def _start_stream_write(spark: SparkSession, options: dict[str, str], work: Path) -> StreamingQuery:
    """A streaming write to the cluster, fed by the text files put into ``work/in`` (one
    micro-batch per file, each in 6 partitions; roundRobin spreads them evenly over the nodes)."""
    (work / "in").mkdir()
    lines = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(work / "in"))
    return (lines.select(F.col("value").alias("body")).repartition(6)
            .writeStream.format("clustermq").options(**options)
            .option("loadBalancingPolicy", "roundRobin")
            .option("checkpointLocation", str(work / "write-checkpoint")).start())


def _feed(query: StreamingQuery, work: Path, name: str, ids: range) -> None:
    """One micro-batch of ``ids`` (a file appears whole in the source directory)."""
    staged = work / f"{name}.tmp"
    staged.write_text("".join(f"{i}\n" for i in ids))
    staged.rename(work / "in" / f"{name}.txt")
    query.processAllAvailable()


def test_a_node_that_joins_a_running_query_is_read_from_and_written_to(
    spark: SparkSession, members: Broker, tmp_path: Path
) -> None:
    """``brokers`` names one seed, ``discovery=cluster``: the query reads both nodes from the
    start; a node added while it runs (``cluster add``) is read from without a restart (a new
    offset key from 0), each message exactly once; a streaming write that runs meanwhile
    publishes to it from the next micro-batch on; a batch write then publishes to all three
    nodes, and a restart from the same checkpoint drains them under the same keys."""
    cluster = members.cluster
    queue, written = new_queue("join"), new_queue("joinw")
    seed = cluster.nodes()[0].name
    options = members.reader_options(queue, brokers=seed, discovery="cluster")
    members.produce(queue, 200, nodes=[0, 1])
    collected: list[Row] = []
    query = start_collecting(spark, options, tmp_path, collected)
    writer = _start_stream_write(spark, {**options, "queue": written}, tmp_path)
    try:
        _feed(writer, tmp_path, "before", range(300))  # 6 partitions of 50 over the 2 nodes
        assert sorted(members.settled_depths(written).values()) == [150, 150]
        wait_for(lambda: len(collected) >= 200, 60, "the backlog of both nodes")
        # the peer the seed named is read from the first batch on (its offset key is there)
        assert set(_offsets(tmp_path / "checkpoint")) == {n.name for n in cluster.nodes()}
        joined = cluster.add_node()
        added_at = time.monotonic()
        sent = 200
        while not any(r["node"] == joined.name for r in collected):
            assert time.monotonic() - added_at < 60, "the joined node was not read from in 60 s"
            members.produce(queue, 10, nodes=[2], first_id=sent)
            sent += 10
            time.sleep(0.5)
        read_after = time.monotonic() - added_at
        print(f"\n[{cluster.flavor}] joined node read from {read_after:.1f} s after it was up "
              f"({sent - 200} messages sent to it meanwhile)")
        wait_for(lambda: len(collected) >= sent, 60, "every message sent")
        time.sleep(1.0)  # a duplicate would come with the next batches

        # the running write: its next micro-batch publishes to the joined node too (the driver
        # asks the seed for the nodes before every batch), 2 of 6 partitions per node
        seed_only = dataclasses.replace(members.connection(written), nodes=members.connection(written).nodes[:1])
        wait_for(lambda: joined.name in {n.name for n in discover(seed_only) or ()}, 30,
                 "the seed naming the joined node")
        _feed(writer, tmp_path, "after", range(300, 600))
        depths = members.settled_depths(written)
        assert depths[joined.name] == 100 and sorted(depths.values()) == [100, 250, 250], depths
    finally:
        writer.stop()
        query.stop()
    ids = Counter(int(r["id"]) for r in collected)
    assert sorted(ids) == list(range(sent)) and set(ids.values()) == {1}, (
        f"{len(ids)} distinct ids of {sent}, repeated: {[i for i, c in ids.items() if c > 1][:10]}")
    assert joined.name in _offsets(tmp_path / "checkpoint")

    # the writer, given the seed alone, publishes to every node (roundRobin: a task per node)
    rows = spark.range(0, 300, 1, 3).select(F.col("id").cast("string").alias("body"))
    (rows.write.format("clustermq").mode("append")
     .options(**{k: v for k, v in options.items()})
     .option("loadBalancingPolicy", "roundRobin").save())
    depths = members.settled_depths(queue)
    assert sorted(depths.values()) == [100, 100, 100], depths

    # a restart from the same checkpoint reads all three nodes, the joined one under its key
    out, _ = drain(spark, options, tmp_path)
    bodies = Counter(r["body"].decode() for r in out.select("body").collect())
    assert sorted(int(b) for b in bodies) == list(range(300)) and set(bodies.values()) == {1}
    # (which node delivers a message is the brokers' choice: a Classic network forwards them to
    # the consumer that subscribed first) the joined node's key is the same as before
    assert set(_offsets(tmp_path / "checkpoint")) == {n.name for n in cluster.nodes()}
    assert sum(members.wait_depth_zero(queue).values()) == 0


def test_a_restart_with_a_changed_brokers_list_reads_on(
    spark: SparkSession, members: Broker, tmp_path: Path
) -> None:
    """One checkpoint, three runs with different ``brokers`` lists (a node added, then one
    removed): over the runs each message is read exactly once (a network may forward an unlisted
    node's messages to the listed ones, so what each run reads is the brokers' choice); the
    checkpoint holds exactly the listed nodes' keys."""
    cluster = members.cluster
    if len(cluster.nodes()) < 3:
        cluster.add_node()
    names = [n.name for n in cluster.nodes()][:3]
    queue = new_queue("relist")
    members.produce(queue, 300, nodes=[0, 1, 2])  # 100 per node
    drain(spark, members.reader_options(queue, brokers=",".join(names[:2])), tmp_path)
    assert set(_offsets(tmp_path / "checkpoint")) == set(names[:2])
    members.produce(queue, 60, nodes=[0, 1, 2], first_id=300)
    drain(spark, members.reader_options(queue, brokers=",".join(names[1:])), tmp_path)
    assert set(_offsets(tmp_path / "checkpoint")) == set(names[1:])
    every_run, _ = drain(spark, members.reader_options(queue, brokers=",".join(names)), tmp_path)
    ids = Counter(loadgen_ids(every_run))  # the three runs append to one sink
    assert sorted(ids) == list(range(360)) and set(ids.values()) == {1}, ids.most_common(3)
    assert sum(members.wait_depth_zero(queue).values()) == 0


#: What Artemis 2.40 logs when a stop with scale-down fails before moving anything: the session
#: factory to the scale-down target is connected, but its topology does not list that connection's
#: node yet (measured once in a whole-suite run, under load)
SCALE_DOWN_RACE = "PrimaryOnlyActivation.freezeConnections"


def test_a_node_stopped_gracefully_while_a_drain_runs_loses_nothing(
    spark: SparkSession, members: Broker, tmp_path: Path
) -> None:
    """``cluster stop`` (SIGTERM) of one of three nodes after the first batch of an
    AvailableNow drain. Artemis scales the node down: its messages move to a peer and are read
    there, the run ends without waiting for the node (unless the stop fails on Artemis's own
    race before moving anything: then as on Classic). Classic: the stopped node keeps its
    backlog in its store, and a run after its restart reads it. Over the runs every message is
    read; a message read twice is one the stopped node had delivered before it went (planned,
    not acknowledged: handled as a lost node's), so its first copy came from that node, or, on
    Classic, one its dying bridge had forwarded and sends again (one ``message_id``)."""
    cluster = members.cluster
    if len(cluster.nodes()) < 3:
        cluster.add_node()
    names = [n.name for n in cluster.nodes()]
    queue = new_queue("leave")
    members.produce(queue, 3000, nodes=[0, 1, 2])
    options = members.reader_options(queue, brokers=",".join(names), maxMessagesPerTrigger=300)
    stopped: list[float] = []

    def stop_after_first(batch: object, batch_id: int) -> None:
        if not stopped:
            cluster.stop_node(2)
            stopped.append(time.monotonic())

    try:
        started = time.monotonic()
        rows, _ = drain(spark, options, tmp_path, on_batch=stop_after_first)
        print(f"\n[{cluster.flavor}] drain with node 2 stopped after its first batch ended "
              f"{time.monotonic() - stopped[0]:.1f} s after the stop ({time.monotonic() - started:.1f} s "
              f"in all) with {rows.count()} rows")
    finally:
        stopped_log = cluster.log_path(2).read_text(errors="replace").splitlines()
        if not cluster.is_running(2):
            cluster.start_node(2)
    scale_lines = [line for line in stopped_log if "scal" in line.lower()]
    print(f"[{cluster.flavor}] node 2 log on scaling: {scale_lines[-3:]}")
    if cluster.flavor == "artemis":
        # The stopped node moved its messages ("Scaled down N messages"), or its stop failed before
        # the move on Artemis's own race (SCALE_DOWN_RACE: broker-behaviour.md, "Cluster topology
        # and scale-down"): then the messages stayed in its store, and the drain after its
        # restart below must read every one of them, as on Classic.
        scaled = any("AMQ221078" in line for line in scale_lines)
        raced = any(SCALE_DOWN_RACE in line for line in stopped_log)
        assert scaled or raced, "\n".join(stopped_log[-40:])
        print(f"[{cluster.flavor}] node 2 {'scaled down' if scaled else 'kept its messages (scale-down race)'}")
    rows, _ = drain(spark, options, tmp_path)  # Classic: the restarted node's backlog
    ids = Counter(loadgen_ids(rows))
    assert sorted(ids) == list(range(3000)), f"{len(ids)} of 3000 ids; missing {sorted(set(range(3000)) - set(ids))[:10]}"
    twice = {i for i, c in ids.items() if c > 1}
    assert all(c <= 2 for c in ids.values()), ids.most_common(3)
    copies: dict[int, list[Row]] = {}
    for r in rows.select(F.col("headers")["loadgen_id"].cast("int").alias("id"), "node", "message_id",
                         "batch_id", "row").orderBy("batch_id", "row").collect():
        copies.setdefault(r["id"], []).append(r)
    from_stopped = {i for i in twice if copies[i][0]["node"] == names[2]}
    # else a copy a dying bridge sent again (Classic, "Copies made by a failed bridge": the
    # stopped node's bridge had forwarded it, the peer delivered it, the node still held it)
    bridge_copies = twice - from_stopped
    assert all(len({c["message_id"] for c in copies[i]}) == 1 for i in bridge_copies), (
        [copies[i] for i in sorted(bridge_copies)[:3]])
    assert len(bridge_copies) <= BRIDGE_COPIES[cluster.flavor], sorted(bridge_copies)[:10]
    print(f"[{cluster.flavor}] 3000 messages read, {len(from_stopped)} twice after a delivery by the "
          f"stopped node, {len(bridge_copies)} twice with one message_id through a failed bridge")
    assert sum(members.wait_depth_zero(queue).values()) == 0


def _lag(query: StreamingQuery) -> list[dict[str, dict[str, int]]]:
    """The reader's per-node lag of every progress record kept (``reportLatestOffset``)."""
    return [json.loads(p["sources"][0]["latestOffset"])
            for p in query.recentProgress if p["sources"][0]["latestOffset"]]


def test_a_discovered_node_that_leaves_is_departed_until_the_cluster_lists_it_again(
    spark: SparkSession, members: Broker, tmp_path: Path
) -> None:
    """``discovery=cluster`` with one seed: a discovered node stopped gracefully (``cluster
    stop``) drops out of what the seed publishes, so the reader marks it departed (one WARNING,
    ``departed: 1`` in its progress lag), stops retrying it and reads the other nodes on, its
    offset key kept; started again, the node is listed again and read from under the same key.
    Every message exactly once (the stop comes when everything read is acknowledged)."""
    cluster = members.cluster
    if len(cluster.nodes()) < 3:
        cluster.add_node()
    names = [n.name for n in cluster.nodes()][:3]
    queue = new_queue("depart")
    options = members.reader_options(queue, brokers=names[0], discovery="cluster",
                                     initialReconnectDelay=100, maxReconnectDelay=500)
    members.produce(queue, 300, nodes=[0, 1, 2])
    collected: list[Row] = []
    retry = f"node {names[2]} still unreachable"
    with python_stderr_to(spark, tmp_path / "reader.log") as log:
        query = start_collecting(spark, options, tmp_path, collected)
        try:
            wait_for(lambda: len(collected) >= 300, 60, "the first 300 messages")
            assert sum(members.wait_depth_zero(queue).values()) == 0  # nothing in flight
            cluster.stop_node(2)
            stopped = time.monotonic()
            wait_for(lambda: any(r.get(names[2], {}).get("departed") for r in _lag(query)), 60,
                     "node 2 reported departed")
            departed_after = time.monotonic() - stopped
            assert log.read_text(errors="replace").count(f"node {names[2]} departed") == 1
            assert names[2] in _offsets(tmp_path / "checkpoint")
            retries = log.read_text(errors="replace").count(retry)
            members.produce(queue, 100, nodes=[0, 1], first_id=300)
            wait_for(lambda: len(collected) >= 400, 60, "the other nodes' messages meanwhile")
            # with maxReconnectDelay 0.5 s a node retried would have failed several times by now
            assert log.read_text(errors="replace").count(retry) <= retries + 1
            cluster.start_node(2)
            up = time.monotonic()
            sent = 400
            while not any(r["node"] == names[2] and r["id"] >= 400 for r in collected):
                assert time.monotonic() - up < 60, "node 2 was not read from in 60 s after its start"
                members.produce(queue, 10, nodes=[2], first_id=sent)
                sent += 10
                time.sleep(0.5)
            back_after = time.monotonic() - up
            wait_for(lambda: len(collected) >= sent, 60, "every message sent")
            time.sleep(1.0)  # a duplicate would come with the next batches
        finally:
            query.stop()
            if not cluster.is_running(2):
                cluster.start_node(2)
        text = log.read_text(errors="replace")
    print(f"\n[{cluster.flavor}] node 2 departed {departed_after:.1f} s after its stop; read from "
          f"again {back_after:.1f} s after its start; {sent} messages")
    assert f"node {names[2]} is listed again" in text
    ids = Counter(int(r["id"]) for r in collected)
    assert sorted(ids) == list(range(sent)) and set(ids.values()) == {1}, (
        f"{len(ids)} distinct ids of {sent}, repeated: {[i for i, c in ids.items() if c > 1][:10]}")
    assert names[2] in _offsets(tmp_path / "checkpoint")


def _jmx(cluster: LocalCluster, index: int, objname: str, *args: str) -> str:
    """``activemq query`` of a node's MBeans matching ``objname`` (``--view`` or ``--invoke``
    in ``args``), over the JVM's local attach (``jcmd ... ManagementAgent.start_local``): the
    local cluster runs no JMX connector, and this needs no port."""
    state = cluster.state()
    pid = state.nodes[index].pid
    if pid is None or not cluster.is_running(index):
        return "(node down)"
    subprocess.run(["jcmd", str(pid), "ManagementAgent.start_local"], capture_output=True, timeout=30)
    jar = Path(state.home) / "bin" / "activemq.jar"
    out = subprocess.run(["java", "-jar", str(jar), "query", "--pid", str(pid), "--objname", objname, *args],
                         capture_output=True, text=True, timeout=60).stdout
    banner = ("Java Runtime", "  Heap", "    JVM", "Extensions", "  [", "ACTIVEMQ_", "Connecting to pid")
    return "\n".join(line for line in out.splitlines() if line.strip() and not line.startswith(banner))


def _held(cluster: LocalCluster, index: int, queue: str) -> Counter[tuple[str, str]]:
    """The messages a node holds, counted by (group, broker path): a message forwarded by a
    network bridge carries the ids of the brokers it came through."""
    broker = cluster.state().nodes[index].name
    where = f"type=Broker,brokerName={broker},destinationType=Queue,destinationName={queue}"
    text = _jmx(cluster, index, where, "--invoke", "browseAsTable")
    rows = text.split("contents={BooleanProperties=")[1:]
    held: Counter[tuple[str, str]] = Counter()
    for row in rows:
        path = re.search(r"BrokerPath=(null|\[[^\]]*\]|[^,]*)", row)
        group = re.search(r"JMSXGroupID=([^,]*)", row)
        held[(group.group(1) if group else "?", path.group(1) if path else "?")] += 1
    return held


def _queue_state(cluster: LocalCluster, queue: str) -> str:
    """What each running node holds for ``queue``: its counts and message-group owners, the
    messages it holds by group and broker path, every consumer (a network bridge's or a
    client's) with what it was dispatched and has not acknowledged, and the node's bridges."""
    parts = []
    for index, node in enumerate(cluster.state().nodes):
        where = f"type=Broker,brokerName={node.name}"
        held = _held(cluster, index, queue) if cluster.is_running(index) else Counter()
        parts.append(f"--- {node.name} ({node.host}:{node.stomp_port})\n" + "\n".join([
            _jmx(cluster, index, where, "--view", "BrokerId"),
            _jmx(cluster, index, f"{where},destinationType=Queue,destinationName={queue}", "--view",
                 "QueueSize,InFlightCount,DispatchCount,DequeueCount,ConsumerCount,MessageGroups"),
            f"held (group, broker path): {sorted(held.items())}",
            _jmx(cluster, index, f"{where},destinationType=Queue,destinationName={queue},endpoint=Consumer,*",
                 "--view", "ConsumerId,ClientId,Network,Priority,DispatchedQueueSize,"
                 "MessageCountAwaitingAcknowledge,PendingQueueSize,PrefetchSize"),
            _jmx(cluster, index, f"{where},connector=*,networkConnectorName=*,networkBridge=*", "--view",
                 "RemoteBrokerName,RemoteBrokerId,CreatedByDuplex,EnqueueCounter,DequeueCounter"),
        ]))
    return "\n".join(parts)


# Classic only: an Artemis node stopped gracefully scales down to its peers, which
# test_a_node_stopped_gracefully_while_a_drain_runs_loses_nothing covers.
@pytest.mark.flavors("classic")
def test_classic_a_joined_node_and_a_restarted_one_are_read_to_the_end(
    spark: SparkSession, members: Broker, tmp_path: Path
) -> None:
    """Under one running query (``discovery=cluster``, one seed, ``maxMessagesPerTrigger`` 500,
    a 1 s trigger): a grouped backlog on both nodes, then a node joins and gets a burst of its
    own, then a non-seed node gets more messages and is stopped gracefully at once, and started
    20 s later. Every message is read, the joined node under its own offset key, and no node
    keeps any.

    The bound, counted from the moment the restarted node is up with its bridges: the reader
    finds it again within a discovery interval (``REFRESH_INTERVAL_S``, the node was departed)
    and tries it at once, not after the back-off its outage grew (``maxReconnectDelay`` 30 s,
    the default; the relisting wakes its supervisor); the node waits ``timeBeforeDispatchStarts`` (``DISPATCH_START_MS``)
    after its first consumer; a bridge that stalled is rebuilt after ``BRIDGE_INACTIVITY_MS``
    plus a bridge reconnect (``MAX_RECONNECT_DELAY_MS``); then what is left takes one 1 s
    trigger per 500 messages. 30 s more for a loaded 2-core machine.

    A message may be read again in two ways, and one message can meet both (three reads): one
    the stopped node had delivered and not seen acknowledged (the batch in flight at the stop and
    the one before it can both be unacknowledged: at most two batches, 1,000, first read from the
    stopped node; docs/broker-behaviour.md, "A group pinned to a bridge that may not carry its
    message", has the counts seen), and one a bridge had forwarded while its node went down and
    the node still held (one ``message_id``, at most a bridge's prefetch, ``BRIDGE_COPIES``;
    docs/broker-behaviour.md, "Copies made by a failed bridge"): the stopping node hands what its
    reader gave back to the bridges, and a forward cut short by the stop leaves a copy on both
    sides."""
    from clustermq.broker.discovery import REFRESH_INTERVAL_S
    from clustermq.devtools.localcluster.classic_flavor import (
        BRIDGE_INACTIVITY_MS,
        DISPATCH_START_MS,
        MAX_RECONNECT_DELAY_MS,
    )

    batch, reconnect_ms, total = 500, 30_000, 6000
    bound = (REFRESH_INTERVAL_S + DISPATCH_START_MS / 1000
             + (BRIDGE_INACTIVITY_MS + MAX_RECONNECT_DELAY_MS) / 1000 + total / batch + 30)
    cluster = members.cluster
    seed, stopped = cluster.nodes()[0].name, 1
    queue = new_queue("rejoin")
    options = members.reader_options(queue, brokers=seed, discovery="cluster", maxMessagesPerTrigger=batch,
                                     maxReconnectDelay=reconnect_ms)
    members.produce(queue, 3000, groups=30, nodes=[0, 1])
    collected: list[Row] = []

    def collect(rows: DataFrame, batch_id: int) -> None:
        collected.extend(rows.select(F.col("headers")["loadgen_id"].cast("int").alias("id"), "node",
                                     "message_id").collect())

    with python_stderr_to(spark, tmp_path / "reader.log") as log:
        query = (spark.readStream.format("clustermq").options(**options).load()
                 .writeStream.foreachBatch(collect)
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(processingTime="1 second").start())
        try:
            wait_for(lambda: len(collected) > 0, 60, "the first batch")
            joined = cluster.add_node()
            members.produce(queue, 2000, groups=30, nodes=[len(cluster.nodes()) - 1], first_id=3000)
            members.produce(queue, 1000, groups=30, nodes=[stopped], first_id=5000)
            cluster.stop_node(stopped)
            stop_at = time.monotonic()
            time.sleep(20)
            cluster.start_node(stopped)
            up_at = time.monotonic()
            deadline = up_at + bound
            while len({r["id"] for r in collected}) < total and time.monotonic() < deadline:
                time.sleep(0.5)
            ids = Counter(int(r["id"]) for r in collected)
            if len(ids) < total:
                missing = sorted(set(range(total)) - set(ids))
                lines = [line for line in log.read_text(errors="replace").splitlines()
                         if "clustermq" in line and any(w in line for w in
                                                        ("lost", "reconnect", "depart", "listed", "joined",
                                                         "new node", "unreachable", "stall", "resubscrib"))]
                raise AssertionError(
                    f"{len(missing)} of {total} ids unread {time.monotonic() - up_at:.0f} s after the "
                    f"restart of node {stopped} ({time.monotonic() - stop_at:.0f} s after its stop; "
                    f"bound {bound:.0f} s): {missing[:20]}...\n"
                    f"depth per node: {members.depths(queue)}\n"
                    f"reader lag: {_lag(query)[-1:]}\nreader log:\n" + "\n".join(lines[-30:])
                    + f"\nbroker state:\n{_queue_state(cluster, queue)}")
            took = time.monotonic() - up_at
            time.sleep(2.0)  # a duplicate would come with the next batches
        finally:
            query.stop()
            if not cluster.is_running(stopped):
                cluster.start_node(stopped)
    print(f"\n[classic] all {total} read {took:.1f} s after node {stopped} was up again (bound {bound:.0f} s)")
    ids = Counter(int(r["id"]) for r in collected)
    assert sorted(ids) == list(range(total)), f"{len(ids)} distinct ids of {total}"
    copies: dict[int, list[Row]] = {}
    for r in collected:
        copies.setdefault(int(r["id"]), []).append(r)
    twice = {i for i, c in ids.items() if c > 1}
    assert all(c <= 3 for c in ids.values()), ids.most_common(3)
    from_stopped = {i for i in twice if copies[i][0]["node"] == cluster.nodes()[stopped].name}
    bridge_copies = twice - from_stopped
    assert len(from_stopped) <= 2 * batch, sorted(from_stopped)[:10]
    assert all(len({c["message_id"] for c in copies[i]}) == 1 for i in bridge_copies), (
        [copies[i] for i in sorted(bridge_copies)[:3]])
    assert len(bridge_copies) <= BRIDGE_COPIES["classic"], sorted(bridge_copies)[:10]
    assert joined.name in _offsets(tmp_path / "checkpoint")
    depths = members.wait_depth_zero(queue)
    assert all(d == 0 for d in depths.values()), depths
