"""Failover pairs as one node: a master/slave (Classic) or primary/backup (Artemis) pair on a
shared store is a ``masterslave:(...)`` node of ``brokers``, and a crash of its live member is a
short outage of that node, not a lost node.

One module-scoped cluster of two pairs per flavor serves every test here; a test that kills a
pair's live member restarts that member (it comes back as the standby) before it ends.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from clustermq.broker.nodes import Node
from clustermq.devtools.localcluster.cluster import LocalCluster
from conftest import Broker, cluster_flavors
from test_localcluster import classic_broker_ids, client, send_persistent
from test_reader import BRIDGE_COPIES, drain
from waits import cluster_state, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

PAIRS = 2
VICTIM = 0


@pytest.fixture(scope="module", params=cluster_flavors())
def pairs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """Two pairs (live + standby each) of the parametrised flavor; stopped by pid at the end."""
    local = LocalCluster(tmp_path_factory.mktemp(f"pairs-{request.param}"))
    started = time.monotonic()
    try:
        local.up(nodes=PAIRS, flavor=request.param, backups=1)
        print(f"\n{PAIRS}-pair {request.param} cluster up in {time.monotonic() - started:.1f} s")
        yield Broker(local)
    finally:
        local.down()


@pytest.fixture(autouse=True)
def _pairs_whole(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every pair has a live member and a standby after each test, also after a failed one."""
    yield
    if "pairs" not in request.fixturenames:
        return
    cluster = request.getfixturevalue("pairs").cluster
    for logical in range(PAIRS):
        if cluster.down_member(logical) is not None:
            cluster.start_standby(logical)


def test_the_group_is_one_node_named_as_written(pairs: Broker) -> None:
    nodes = pairs.cluster.nodes()
    assert len(nodes) == PAIRS and all(len(n.members) == 2 for n in nodes)
    assert pairs.cluster.brokers.count("masterslave:(") == PAIRS
    assert [n.name for n in nodes] == [n.name for n in pairs.connection("q").nodes]


def took_over(pairs: Broker) -> int:
    """The index of the victim pair's new live member, once it accepts logins; the members' log
    tails when none does within a minute (the standby never took the store over)."""
    live = pairs.cluster.live_member(VICTIM, timeout=60)
    if live is None:
        state = pairs.cluster.state()
        tails = {n.index: pairs.cluster.log_tail(n.index, 15) for n in state.nodes
                 if n.index == VICTIM or n.backup_of == VICTIM}
        raise AssertionError(f"no member of pair {VICTIM} accepts logins 60 s after the kill: {tails}")
    return live


def test_reader_keeps_reading_through_a_killed_live_member(
    spark: SparkSession, pairs: Broker, tmp_path: Path
) -> None:
    """SIGKILL the live member of a pair mid-stream: every message read, the query never fails,
    the queue ends empty; the failover time (kill to the first message of a batch planned after
    it from that node, so from the new live member) is printed."""
    queue = f"test.pairs.read.{uuid.uuid4().hex[:8]}"
    total, batch = 6000, 300
    victim = pairs.cluster.nodes()[VICTIM].name
    collected: list[Row] = []
    arrivals: list[tuple[float, int, Counter[str]]] = []  # (time, batch id, rows per node)
    options = pairs.reader_options(queue, maxMessagesPerTrigger=batch, initialReconnectDelay=200,
                                   maxReconnectDelay=1000)
    pairs.produce(queue, total - 1000)

    def collect(frame: DataFrame, batch_id: int) -> None:
        rows = frame.select(F.col("headers")["loadgen_id"].cast("int").alias("id"), "node",
                            "message_id").collect()
        collected.extend(rows)
        arrivals.append((time.monotonic(), batch_id, Counter(r.node for r in rows)))

    query = (spark.readStream.format("clustermq").options(**options).load()
             .writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(lambda: Counter(r.node for r in collected)[victim] >= batch // PAIRS, 120, "first batches")
        before = arrivals[-1][1] if arrivals else -1  # the last batch that ran before the kill
        killed_at = time.monotonic()
        member = pairs.cluster.kill_live(VICTIM)
        live = took_over(pairs)
        if pairs.flavor == "classic":
            # The network's loop check goes by broker id: a new master with an id of its own had
            # its predecessor's forwarded messages sent back to it, and lost some of them
            # (classic_flavor.broker_id).
            wait_for(lambda: classic_broker_ids(pairs.cluster, live), 30, f"member {live}'s start line")
            ids = {*classic_broker_ids(pairs.cluster, member), *classic_broker_ids(pairs.cluster, live)}
            assert len(ids) == 1, f"the members of {victim} started with broker ids {sorted(ids)}"
        pairs.produce(queue, 1000, first_id=total - 1000)
        wait_for(lambda: {r.id for r in collected} >= set(range(total)), 180, "every message", interval=0.5,
                 explain=lambda: cluster_state(pairs, queue, range(total), [r.id for r in collected]))
        assert query.isActive and query.exception() is None
        wait_for(lambda: all(d == 0 for d in pairs.depths(queue).values()), 60, "empty queue",
                 explain=lambda: cluster_state(pairs, queue))
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
    # The batch running at the kill and the next may hold what the dead connection delivered;
    # a later batch's rows of the pair come from the new live member (an upper bound).
    after = [t for t, i, per_node in arrivals if i >= before + 2 and per_node[victim]]
    failover = after[0] - killed_at if after else float("nan")
    ids = Counter(r.id for r in collected)
    duplicated = {i: c for i, c in ids.items() if c > 1}
    print(f"\n[{pairs.flavor}] live member {member} of {victim} killed: failover {failover:.1f} s "
          f"(kill to the first message from the new live member); {len(collected)} rows for "
          f"{total} messages, {len(duplicated)} read twice")
    assert set(ids) == set(range(total))
    # Only what the dead connection had planned or delivered unacknowledged comes again: each at
    # most twice, at most two batches' worth, one copy from the victim's pair (the connection
    # that died). The other copy comes from the new live member, or from the other pair when the
    # network moved it there meanwhile (Classic: the new master forwards to a node with a consumer).
    # On Classic a message whose *first* copy came from the other pair is a failed bridge's: the
    # dead master's bridge had forwarded it, and the new master, finding it unacknowledged in the
    # store, delivers or forwards it again after the peer delivered the first copy, with the same
    # ``message_id`` (broker-behaviour.md "Copies made by a failed bridge"). It was never in the
    # dead connection's window, so it is not counted against the two batches (measured: 692 read
    # twice, 89 with both copies from the other pair, the other 603 one more than the window
    # when every copy with one from the victim's pair was counted against it).
    assert all(c == 2 for c in duplicated.values()), duplicated
    copies_from: dict[int, list[Row]] = {}
    for r in collected:  # in batch order: the first copy first
        if r.id in duplicated:
            copies_from.setdefault(r.id, []).append(r)
    bridge_copies = {i for i, copies in copies_from.items() if copies[0].node != victim}
    assert all(len({c.message_id for c in copies_from[i]}) == 1 for i in bridge_copies), \
        [copies_from[i] for i in sorted(bridge_copies)[:3]]
    assert len(bridge_copies) <= BRIDGE_COPIES[pairs.flavor], sorted(bridge_copies)[:10]
    assert len(duplicated) - len(bridge_copies) <= 2 * batch, (len(duplicated), len(bridge_copies))
    moved = sum(1 for i, copies in copies_from.items()
                if i not in bridge_copies and {c.node for c in copies} != {victim})
    print(f"[{pairs.flavor}] of the {len(duplicated)} read twice, {moved} had the second copy from "
          f"the other pair, {len(bridge_copies)} were a failed bridge's copies")


def member_node(pairs: Broker, member: int) -> Node:
    """A member's own STOMP endpoint (a client of the pair would fail over between them)."""
    state = pairs.cluster.state().nodes[member]
    return Node(host=state.host, port=state.stomp_port)


@pytest.mark.flavors("classic")
def test_a_new_master_is_the_same_broker_to_the_network(pairs: Broker) -> None:
    """A node does not send a message back to the node it came from while it has a consumer of
    its own: the bridge's loop check finds the origin's broker id in the message's broker path.
    After a failover the new master must carry the old one's id, or the other pair sends the
    messages the old master had forwarded straight back to it (with two copies of one message,
    the exchange that lost both; classic_flavor.broker_id).

    A holder on pair 1 (prefetch 1, never acknowledging) attracts pair 0's 50 messages; pair 0's
    master is killed; a consumer on the new master then gets the 50 messages produced on pair 1
    (the bridge carries them) but none of pair 0's while the holder stays; when the holder leaves,
    pair 1 replays pair 0's 50 to their origin: all 100 arrive, once each."""
    username, password = pairs.cluster.credentials
    queue = f"test.pairs.origin.{uuid.uuid4().hex[:8]}"
    destination = f"/queue/{queue}"
    victim, other = (n.name for n in pairs.cluster.nodes())
    from_victim = [f"v-{i}" for i in range(50)]
    from_other = [f"o-{i}" for i in range(50)]
    holder_node = member_node(pairs, pairs.cluster.live_member(1))
    with client(holder_node, username, password) as (holder, _):
        holder.subscribe(destination, id="hold", ack="client-individual",
                         headers={"activemq.prefetchSize": "1"})
        send_persistent(member_node(pairs, pairs.cluster.live_member(VICTIM)), (username, password),
                        destination, from_victim)
        wait_for(lambda: pairs.depths(queue) == {victim: 0, other: len(from_victim)}, 60,
                 f"pair 0's {len(from_victim)} messages moved to pair 1",
                 explain=lambda: cluster_state(pairs, queue))
        pairs.cluster.kill_live(VICTIM)
        live = took_over(pairs)
        got: Counter[str] = Counter()
        with client(member_node(pairs, live), username, password) as (taker, taken):
            taker.subscribe(destination, id="take", ack="auto", receipt="taking")
            taken.wait_receipt("taking")
            send_persistent(holder_node, (username, password), destination, from_other)

            def take() -> Counter[str]:
                while not taken.messages.empty():
                    got[taken.messages.get().body] += 1
                return got

            wait_for(lambda: set(take()) >= set(from_other), 60,
                     f"pair 1's own {len(from_other)} messages on the new master",
                     explain=lambda: f"got {sorted(got)}\n{cluster_state(pairs, queue)}")
            sent_back = sorted(b for b in got if b.startswith("v-"))
            assert not sent_back, (
                f"pair 1 sent {len(sent_back)} of pair 0's messages back to pair 0's new master "
                f"while it had a consumer of its own (the new master is a stranger to the "
                f"network's loop check): {sent_back[:10]}")
            holder.disconnect()  # leaves without acknowledging: pair 1 replays to the origin
            wait_for(lambda: set(take()) >= {*from_victim, *from_other}, 60,
                     "pair 0's messages replayed to it once pair 1 had no consumer",
                     explain=lambda: f"got {sorted(got)}\n{cluster_state(pairs, queue)}")
            take()
    copies = {b: n for b, n in got.items() if n != 1}
    assert sorted(got) == sorted([*from_victim, *from_other]) and not copies, copies
    assert all(d == 0 for d in pairs.wait_depth_zero(queue).values())


def test_writer_during_a_killed_live_member_completes_or_fails_and_a_rerun_loses_nothing(
    spark: SparkSession, pairs: Broker, tmp_path: Path
) -> None:
    """Kill a pair's live member while a batch write runs: the job either completes or fails
    cleanly; re-run until it completed, every row is in the queue, none more than once per run
    that published it."""
    queue = f"test.pairs.write.{uuid.uuid4().hex[:8]}"
    total = 6000
    df: DataFrame = spark.range(total).repartition(6).select(F.col("id").cast("string").alias("body"))
    outcome: list[BaseException | None] = []
    killed: list[int] = []
    tracker = spark.sparkContext.statusTracker()

    def kill_when_tasks_run() -> None:
        """The write runs in the test's thread (a Python data source is looked up through the
        calling thread's session); the kill comes from here once its tasks run."""
        deadline = time.monotonic() + 60
        while not tracker.getActiveStageIds() and not outcome and time.monotonic() < deadline:
            time.sleep(0.02)
        killed.append(pairs.cluster.kill_live(VICTIM))

    killer = threading.Thread(target=kill_when_tasks_run, daemon=True)
    killer.start()
    try:
        df.write.format("clustermq").mode("append").options(**pairs.reader_options(queue)).save()
        outcome.append(None)
    except Exception as exc:  # the outcome is asserted below
        outcome.append(exc)
    killer.join(120)
    assert killed, "the live member was not killed"
    member = killed[0]
    runs = 1
    if outcome[0] is not None:
        print(f"\n[{pairs.flavor}] write during the kill failed cleanly: {str(outcome[0])[:300]}")
        took_over(pairs)
        df.write.format("clustermq").mode("append").options(**pairs.reader_options(queue)).save()
        runs = 2
    rows, _ = drain(spark, pairs.reader_options(queue), tmp_path)
    bodies = Counter(int(r[0]) for r in rows.select(F.col("body").cast("string")).collect())
    print(f"[{pairs.flavor}] live member {member} killed during the write: {runs} run(s), "
          f"{sum(bodies.values())} messages for {total} rows, {len(bodies)} distinct")
    assert set(bodies) == set(range(total))
    assert max(bodies.values()) <= runs
    if runs == 1:
        assert sum(bodies.values()) == total
    assert all(d == 0 for d in pairs.wait_depth_zero(queue).values())


def test_cluster_commands_show_roles_kill_the_live_member_and_restart_it_as_standby(pairs: Broker) -> None:
    """``cluster status`` shows each member's pair and role; ``cluster kill N`` SIGKILLs node N's
    live member (the standby takes over); ``cluster start N`` brings it back as the standby."""
    import subprocess
    import sys

    directory = str(pairs.cluster.dir)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "clustermq.devtools.cli", "cluster", *args, "--dir", directory],
                              capture_output=True, text=True, timeout=180)

    def roles() -> dict[int, str]:  # member index -> role, from the status table's role column
        lines = cli("status").stdout.splitlines()
        role = next(line.split() for line in lines if line.startswith("node ")).index("role")
        rows = [line.split() for line in lines if line[:1].isdigit()]
        return {int(r[0]): r[role] for r in rows}

    live = pairs.cluster.live_member(1)
    assert live is not None
    before = roles()
    assert before[live] == "live" and sorted(before.values()).count("standby") == PAIRS, before
    killed = cli("kill", "1")
    assert killed.returncode == 0 and f"live member {live}" in killed.stdout, killed.stdout + killed.stderr
    wait_for(lambda: pairs.cluster.live_member(1) not in (None, live), 60, "the standby to take over")
    assert roles()[live] == "down"
    started = cli("start", "1")
    assert started.returncode == 0, started.stdout + started.stderr
    assert roles()[live] == "standby"
    assert cli("status").returncode == 0
