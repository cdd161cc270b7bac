"""Network cuts that leave sockets open: one node behind a TCP proxy the test controls.

Killing a broker closes its sockets, so the reader sees EOF at once; a real
partition does not. Here node 1 is reached through :class:`tcpproxy.TcpProxy`, which can
*stall* (forward nothing, close nothing: only STOMP heart-beats can tell) and *drop* (close the
connections, refuse new ones). The other nodes are direct.

The query runs in its own driver process (``spark_jobs/queue_to_parquet.py``) because the
reader lives in a Python process that Spark's JVM starts: its log reaches the driver's stderr,
which the test writes to a file and polls for the reader's ``lost node ...`` and
``reconnected to node ...`` lines (subscription.py logs both at WARNING, the level Python shows
without any logging set-up).

Detection bound: stomp.py's heart-beat loop declares the connection dead when nothing was
received for ``2.5 x heartbeat`` (connection.HEARTBEAT_RECEIVE_SCALE; both Classic and Artemis
answer ``heart-beat:1000,1000`` to a client asking 1000,1000, so the negotiated interval is the
option's). The loop sleeps exactly until that deadline, so detection comes at most 2.5 s after
the last byte (measured: 2.45 s Classic, 2.48 s Artemis, in steady state). Exception: in the
first 2.5 x heartbeat after CONNECTED stomp.py grants a grace period, so a connection younger
than that can take up to 5 x heartbeat; the test stalls long after connecting. The margin added
is for the driver log's path (reader stderr -> JVM -> file) and a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import pyarrow.parquet as pq
import pytest

from tcpproxy import TcpProxy
from test_reader_faults import committed_batches, connector_lines, kill_group
from waits import artemis_queue_state, dead_letters, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

JOB = Path(__file__).resolve().parents[1] / "spark_jobs" / "queue_to_parquet.py"

HEARTBEAT_MS = 1000
RECEIVE_SCALE = 2.5  # connection.HEARTBEAT_RECEIVE_SCALE
DETECTION_MARGIN_S = 1.5
VICTIM = 1


def start_driver(broker, brokers: str, queue: str, out: Path, checkpoint: Path, log: Path,
                 max_per_trigger: int, options: dict[str, object]) -> subprocess.Popen:
    username, password = broker.cluster.credentials
    env = dict(os.environ, CLUSTERMQ_USERNAME=username, CLUSTERMQ_PASSWORD=password)
    args = [sys.executable, str(JOB), "--brokers", brokers, "--queue", queue,
            "--out", str(out), "--checkpoint", str(checkpoint),
            "--trigger", "processingTime=200 milliseconds",
            "--max-messages-per-trigger", str(max_per_trigger)]
    for key, value in options.items():
        args += ["--option", f"{key}={value}"]
    return subprocess.Popen(args, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)


class Row(NamedTuple):
    i: int
    redelivered: bool
    node: str
    message_id: str


def committed_rows(out: Path) -> list[Row]:
    """Every row in files the sink's log has committed: the producer's id, and how and where
    it was delivered.

    Read from ``_spark_metadata`` rather than by listing the folder: a running batch's files
    exist before they are committed (and may be half written).
    """
    meta = out / "_spark_metadata"
    paths: set[str] = set()
    if meta.exists():
        for entry in meta.iterdir():
            if not entry.name.split(".")[0].isdigit():
                continue
            for line in entry.read_text().splitlines()[1:]:
                if line.strip():
                    record = json.loads(line)
                    if record.get("action", "add") == "add":
                        paths.add(record["path"].removeprefix("file://"))
    rows: list[Row] = []
    for path in sorted(paths):
        table = pq.read_table(path, columns=["headers", "redelivered", "node", "message_id"])
        columns = [table.column(c).to_pylist() for c in ("headers", "redelivered", "node", "message_id")]
        rows += [Row(int(dict(h)["loadgen_id"]), bool(r), n, m) for h, r, n, m in zip(*columns)]
    return rows


def committed_ids(out: Path) -> set[int]:
    return {r.i for r in committed_rows(out)}


def browsed_ids(broker, queue: str) -> dict[str, set[int]]:
    """``loadgen_id`` of every message queued on each node (Classic's browse, which neither
    consumes nor creates network demand), read directly, not through the proxy."""
    from clustermq.options import ReadOptions
    from clustermq.read.browse import browse_node

    found: dict[str, set[int]] = {}
    for i, node in enumerate(broker.cluster.nodes()):
        options = ReadOptions.parse(broker.reader_options(queue, brokers=node.name))
        found[node.name] = {int(dict(h)["loadgen_id"]) for batch in browse_node(node, i, options)
                            for h in batch.column(batch.schema.get_field_index("headers")).to_pylist()}
    return found


def arrivals_while_cut(out: Path, wanted: set[int], proc: subprocess.Popen, quiet_s: float,
                       timeout: float) -> set[int]:
    """The ``wanted`` ids the sink committed: all of them, or those that came before the sink
    stopped committing anything for ``quiet_s`` (polled every 0.5 s; the driver's death ends the
    wait too). Any committed id counts as progress, not only a wanted one: the wanted messages
    queue behind the backlog the direct nodes still hold, and under load that backlog took longer
    than ``quiet_s`` to drain (a run saw 0 of 1,000 wanted ids after 15 s while batches of 500
    older messages committed every 2.5 s)."""
    deadline = time.monotonic() + timeout
    committed: set[int] = set()
    changed = time.monotonic()
    while time.monotonic() < deadline and proc.poll() is None:
        now = committed_ids(out)
        if len(now) != len(committed):
            committed, changed = now, time.monotonic()
        if wanted <= committed or time.monotonic() - changed >= quiet_s:
            break
        time.sleep(0.5)
    return wanted & committed


class DriverLog:
    """The driver's log file, and when each line of interest was first seen."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def text(self) -> str:
        return self.path.read_text(errors="replace") if self.path.exists() else ""

    def count(self, pattern: str) -> int:
        return len(re.findall(pattern, self.text()))

    def wait_count(self, pattern: str, count: int, timeout: float, proc: subprocess.Popen,
                   what: str) -> float:
        """Poll (every 50 ms) until ``pattern`` occurs ``count`` times; return when it did."""
        wait_for(lambda: self.count(pattern) >= count or proc.poll() is not None, timeout, what,
                 interval=0.05)
        seen = time.monotonic()
        assert proc.poll() is None, f"driver died waiting for {what}:\n{self.text()[-3000:]}"
        return seen


def test_network_cut_with_open_sockets_is_detected_and_loses_nothing(broker, tmp_path: Path) -> None:
    """Stall (sockets open), then drop: detection in bound, others deliver, nothing lost."""
    queue = f"test.netcut.{uuid.uuid4().hex[:8]}"
    nodes = list(broker.cluster.nodes())
    out, checkpoint, log_path = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "driver.log"
    log = DriverLog(log_path)
    first, during, after_stall, during_drop, last = 4000, 1000, 1000, 500, 500
    total = first + during + after_stall + during_drop + last
    bound_s = HEARTBEAT_MS / 1000 * RECEIVE_SCALE + DETECTION_MARGIN_S

    with TcpProxy(nodes[VICTIM].host, nodes[VICTIM].port) as proxy:
        victim = proxy.address
        brokers = ",".join(proxy.address if i == VICTIM else n.name for i, n in enumerate(nodes))
        lost = rf"lost node {re.escape(victim)} \(([^)]*)\); (\d+) unplanned"
        back = rf"reconnected to node {re.escape(victim)}"
        broker.produce(queue, first, first_id=0)
        proc = start_driver(
            broker, brokers, queue, out, checkpoint, log_path, max_per_trigger=500,
            options={"heartbeat": HEARTBEAT_MS, "initialReconnectDelay": 200,
                     "maxReconnectDelay": 1000, "useExponentialBackOff": "false"})
        try:
            # Stall while the victim still has delivered, unacknowledged messages in flight:
            # the backlog is 8 batches, and the connection is older than the stomp.py grace.
            wait_for(lambda: committed_batches(checkpoint) >= 1 or proc.poll() is not None, 180,
                     "a committed batch")
            assert proc.poll() is None, log.text()[-3000:]
            # The reader's consuming connection is the one that carried its messages; its depth
            # probe (read/lag.py, every 10 s) may have another one open for a moment.
            opened = proxy.open_connections()
            reader_connection = max(opened, key=opened.__getitem__, default=None)
            assert reader_connection is not None and opened[reader_connection] > 0, (
                f"no connection through the proxy carried messages: open connections (accept "
                f"order: bytes to the reader) {opened}")
            assert not log.count(lost) and not log.count(back), (
                f"the reader lost or reconnected to the victim before the cut:\n{log.text()[-3000:]}")
            assert len(committed_rows(out)) < first, "backlog drained before the cut"

            # ---- stall: nothing moves, nothing closes
            stalled_at = time.monotonic()
            proxy.stall()
            seen = log.wait_count(lost, 1, 30, proc, "the stalled node to be declared lost")
            detection_s = seen - stalled_at
            reason, given_back = re.findall(lost, log.text())[0]
            print(f"\n[{broker.flavor}] stall detected after {detection_s:.2f} s "
                  f"(bound {bound_s:.1f} s): {reason}; {given_back} messages given back")
            assert reason.startswith("heart-beat timeout"), reason
            assert detection_s <= bound_s, f"stall detected after {detection_s:.2f} s > {bound_s} s"
            assert reader_connection in proxy.open_connections(), (
                f"the stall must not close the proxied sockets: the reader's connection "
                f"{reader_connection} is gone; open: {proxy.open_connections()}")

            # the other nodes keep delivering while the victim is cut off
            broker.produce(queue, during, first_id=first, nodes=[0, 2])
            wanted = set(range(first, first + during))
            arrived = arrivals_while_cut(out, wanted, proc, quiet_s=15.0, timeout=120.0)
            assert proc.poll() is None, log.text()[-3000:]

            def sent_to(i: int) -> str:  # the load generator sends id i to nodes[0, 2][i % 2]
                return "node0" if i % 2 == 0 else "node2"

            missing = Counter(map(sent_to, wanted - arrived))
            delivered = Counter(map(sent_to, arrived))
            print(f"[{broker.flavor}] during the stall: {len(arrived)} of {during} messages "
                  f"produced to the other nodes arrived {dict(delivered)}; not yet {dict(missing)}")
            backlog_left = first - len(committed_ids(out) & set(range(first)))
            assert set(delivered) == {"node0", "node2"}, (
                f"a direct node stopped: {dict(delivered)} of the {during} produced during the stall "
                f"arrived; {backlog_left} of the {first} backlog messages not committed yet; "
                f"depths {broker.depths(queue)}; driver log:\n" + connector_lines(log.text(), 30))
            if missing:
                assert broker.flavor == "classic", f"not delivered during the stall: {dict(missing)}"
                # Classic: the cut node's demand can outlive its consumer on the other nodes (a
                # peer that did not hear of the consumer's end keeps forwarding to it), so part
                # of a direct node's messages can wait on the cut node (82 of node 0's
                # 500 in one measured run, while node 1's own bridges were refused as "already
                # connected"). A late message may also be in flight (dispatched to a consumer or
                # a bridge, counted in a depth, not browsable). One that is neither is lost: in a
                # clean-clone run 165 of the 1,000 were, copies replayed back to node 0 while it
                # still held the originals (docs/broker-behaviour.md, "A copy that comes back to
                # a node that still holds the message"). The late ids are read after the browse
                # and the depths: an id still uncommitted then was not acknowledged at either.
                queued = browsed_ids(broker, queue)
                depths_now = broker.depths(queue)
                late = wanted - committed_ids(out)
                in_flight = {name: (depths_now.get(name) or 0) - len(ids) for name, ids in queued.items()}
                unbrowsed = late - set().union(*queued.values())
                where = {name: len(late & ids) for name, ids in queued.items()}
                print(f"[{broker.flavor}] not yet arrived: {len(late)}; queued per node {where}; "
                      f"not browsable {len(unbrowsed)}; depths {depths_now}; in flight {in_flight}")
                assert len(unbrowsed) <= sum(max(0, n) for n in in_flight.values()), (
                    f"lost: {len(unbrowsed)} of the {len(late)} late messages are neither queued on a "
                    f"node nor in flight (depth minus browsed per node {in_flight}, depths {depths_now}; "
                    f"look for 'cursor got duplicate send' in the broker logs): "
                    f"{sorted(unbrowsed)[:20]}; driver log:\n" + connector_lines(log.text(), 30))
            refused_while_stalled = proxy.refused
            assert refused_while_stalled > 0, "the reader did not try to reconnect while cut"
            assert log.count(back) == 0

            # ---- resume: the reader reconnects on its own
            resumed_at = time.monotonic()
            proxy.resume()
            log.wait_count(back, 1, 30, proc, "the reader to reconnect after the stall")
            print(f"[{broker.flavor}] reconnected {time.monotonic() - resumed_at:.2f} s after "
                  f"resume ({refused_while_stalled} attempts refused while stalled)")
            broker.produce(queue, after_stall, first_id=first + during)

            # ---- drop: connections closed, new ones refused
            wait_for(lambda: proxy.connections >= 1, 30, "a live proxied connection")
            dropped_at = time.monotonic()
            proxy.drop()
            seen = log.wait_count(lost, 2, 30, proc, "the dropped node to be declared lost")
            reason = re.findall(lost, log.text())[1][0]
            print(f"[{broker.flavor}] drop detected after {seen - dropped_at:.2f} s: {reason}")
            assert reason == "connection lost", reason
            assert seen - dropped_at <= bound_s
            broker.produce(queue, during_drop, first_id=first + during + after_stall, nodes=[0, 2])
            wait_for(lambda: proxy.refused > refused_while_stalled, 30,
                     "a refused reconnect attempt while dropped")
            proxy.resume()
            log.wait_count(back, 2, 30, proc, "the reader to reconnect after the drop")
            broker.produce(queue, last, first_id=total - last)

            try:
                wait_for(lambda: committed_ids(out) >= set(range(total)) or proc.poll() is not None,
                         240, "every message in the sink", interval=1.0)
            except AssertionError as exc:
                late = sorted(set(range(total)) - committed_ids(out))
                raise AssertionError(
                    f"{exc}: {len(late)} missing {late[:20]}; depths {broker.depths(queue)}, "
                    f"dead letters {broker.depths(dead_letters(broker))}; driver log:\n"
                    + connector_lines(log.text(), 40)) from None
            assert proc.poll() is None, f"the query failed:\n{log.text()[-3000:]}"
            depths = broker.wait_depth_zero(queue, timeout=60)
            returned: Counter[int] = Counter()
            if depths != {n.name: 0 for n in nodes}:
                returned = return_stranded(broker, queue, nodes[VICTIM].name, depths, log, lost,
                                           back, proc, out)
            assert proc.poll() is None and "StreamingQueryException" not in log.text()
        finally:
            kill_group(proc)

    rows = committed_rows(out)
    ids = [r.i for r in rows]
    assert set(ids) == set(range(total)), f"missing {sorted(set(range(total)) - set(ids))[:20]}"
    copies: dict[int, list[Row]] = {}
    for r in rows:
        copies.setdefault(r.i, []).append(r)
    duplicated = {i: c for i, c in copies.items() if len(c) > 1}
    flagged = sum(any(r.redelivered for r in c) for c in duplicated.values())
    same_id = sum(len({r.message_id for r in c}) == 1 for c in duplicated.values())
    others = [line for line in log.text().splitlines() if "lost node" in line and victim not in line]
    print(f"[{broker.flavor}] losses of direct nodes (false alarms): {len(others)} {others}")
    print(f"[{broker.flavor}] rows {len(rows)}, distinct {len(copies)}, ids twice or more "
          f"{len(duplicated)} ({flagged} with a copy flagged redelivered, {same_id} with one "
          "message_id)")
    # Duplicates come only from batches planned on a connection to the cut node that broke
    # before their ACK: at most the batch whose ACK was due and the planned one (2 x 500) per
    # cut, each message once more per cut, and one copy read on the cut connection; a copy an
    # Artemis node stranded (return_stranded) is one more of an id it returned.
    assert len(duplicated) <= 2 * (2 * 500) + returned.total(), (len(duplicated), dict(returned))
    odd = {i: c for i, c in duplicated.items()
           if len(c) > 3 + returned[i] or victim not in {r.node for r in c}}
    assert not odd, list(odd.items())[:5]
    if broker.flavor == "classic":
        # the cut node redelivers with the message_id, flagged (which copy comes first in file
        # order is arbitrary)
        assert flagged == same_id == len(duplicated), \
            [c for c in duplicated.values() if len({r.message_id for r in c}) > 1
             or not any(r.redelivered for r in c)][:5]
    else:
        # Artemis redelivers on the node with the same message_id, not always flagged, or moves
        # the message to another node with a new one (README, "Delivery guarantees")
        unexplained = [c for c in duplicated.values() if not any(r.redelivered for r in c)
                       and len({r.message_id for r in c}) > 1 and len({r.node for r in c}) == 1]
        assert not unexplained, unexplained[:5]


def return_stranded(broker, queue: str, victim: str, depths: dict[str, int | None],
                    log: DriverLog, lost: str, back: str, proc: subprocess.Popen, out: Path) -> Counter[int]:
    """Every id is committed and a node still counts messages: only the documented Artemis
    defect may explain it, and exactly so (docs/broker-behaviour.md, "A message stranded after
    a killed driver"): on the cut node only, at most one per connection the reader lost to it,
    counted while no consumer has it in delivery; a restart of the node returns it to the
    running reader, which commits it as one more copy. Anything else fails with what each node
    holds. Returns the ids the restart returned."""
    held = {name: d for name, d in depths.items() if d}
    lost_connections = log.count(lost)
    state = artemis_queue_state(broker, queue) if broker.flavor == "artemis" else {}
    counters = state.get(victim, {})
    count = held.get(victim) or 0
    if not (broker.flavor == "artemis" and set(held) == {victim} and count <= lost_connections
            and counters.get("messageCount") == count and counters.get("deliveringCount") == 0
            and counters.get("scheduledCount") == 0):
        later = broker.wait_depth_zero(queue, timeout=90)
        raise AssertionError(f"depths {depths} 60 s after every row was committed, {later} 90 s "
                             f"later ({lost_connections} connections to the cut node {victim} lost; "
                             f"Artemis counters {state}); driver log:\n" + connector_lines(log.text(), 30))
    rows, reconnects = Counter(r.i for r in committed_rows(out)), log.count(back)
    restarted = broker.restart_nodes_holding(queue)
    print(f"[{broker.flavor}] {count} stranded on the cut node {victim} after {lost_connections} "
          f"lost connections ({counters}): restarted {restarted}")
    log.wait_count(back, reconnects + 1, 60, proc, "the reader to reconnect to the restarted node")
    after = broker.wait_depth_zero(queue, timeout=60)
    assert after == {name: 0 for name in depths}, f"depths {after} after the restart of {victim}"
    # acknowledged after its batch committed: the depth is 0, so the copy is in the sink
    returned = Counter(r.i for r in committed_rows(out)) - rows
    assert returned.total() == count, (f"{count} stranded, {returned.total()} more rows committed "
                                       f"after the restart: {dict(returned)}")
    return returned


def test_broker_redelivers_what_a_stalled_consumer_held(broker) -> None:
    """What the broker does on its own when a consumer's network stalls: how long until the
    messages delivered (not acknowledged) on the stalled connection go to another consumer.

    This is the delay before the reader's given-back messages can come back after a stall; it
    is the broker's heart-beat check, not the connector's. Expected from the brokers: Classic
    closes a STOMP connection that sent nothing for the promised interval (checked every
    interval), Artemis after its TTL (2 x heart-beat, checked every 2 s). Measured with a 1 s
    heart-beat: about 3 s on both.
    """
    import stomp

    from clustermq.broker.stomp_connection import close_connection, open_connection
    from clustermq.options import parse_connection_options

    queue = f"test.redeliver.{uuid.uuid4().hex[:8]}"
    node = broker.cluster.nodes()[VICTIM]
    username, password = broker.cluster.credentials
    broker.produce(queue, 50, nodes=[VICTIM])
    destination = broker.destination(queue)
    extra = {"activemq.prefetchSize": "20"} if broker.flavor == "classic" else {
        "destination-type": "ANYCAST", "consumer-window-size": "4096"}

    class Collect(stomp.ConnectionListener):
        def __init__(self) -> None:
            self.frames: list[tuple[float, str, str]] = []

        def on_message(self, frame) -> None:  # type: ignore[no-untyped-def]
            self.frames.append((time.monotonic(), frame.headers.get("loadgen_id", ""),
                                frame.headers.get("redelivered", "false")))

    def options(address: str):  # type: ignore[no-untyped-def]
        return parse_connection_options({"brokers": address, "queue": queue, "username": username,
                                         "password": password, "heartbeat": str(HEARTBEAT_MS)})

    with TcpProxy(node.host, node.port) as proxy:
        held = Collect()
        conn, _ = open_connection(options(proxy.address).nodes[0], options(proxy.address), held)
        other = None
        try:
            conn.subscribe(destination=destination, id="held", ack="client", headers=extra)
            wait_for(lambda: len(held.frames) > 0, 30, "deliveries on the proxied connection")
            time.sleep(HEARTBEAT_MS / 1000 * RECEIVE_SCALE)  # past stomp.py's start-up grace
            in_flight = {i for _, i, _ in held.frames}
            stalled_at = time.monotonic()
            proxy.stall()
            fresh = Collect()
            other, _ = open_connection(node, options(node.name), fresh)
            other.subscribe(destination=destination, id="other", ack="auto",
                            headers={k: v for k, v in extra.items() if k == "destination-type"})
            try:
                wait_for(lambda: in_flight <= {i for _, i, _ in fresh.frames}, 30,
                         "the stalled consumer's messages at another consumer", interval=0.05)
            except AssertionError as exc:
                got = {i for _, i, _ in fresh.frames}
                raise AssertionError(
                    f"{exc}: {len(in_flight)} held {sorted(in_flight, key=int)}, of which "
                    f"{sorted(in_flight - got, key=int)} not redelivered; the other consumer got "
                    f"{len(got)}; held connection saw {len(held.frames)} frames; depths "
                    f"{broker.depths(queue)}"
                    + (f", queue state {artemis_queue_state(broker, queue)}" if broker.flavor == "artemis" else "")
                    + f"; broker log:\n{broker.cluster.log_tail(VICTIM, 12)}"
                ) from None
            back_at = max(t for t, i, _ in fresh.frames if i in in_flight)
            redelivery_s = back_at - stalled_at
            redelivered = [i for _, i, r in fresh.frames if i in in_flight and r == "true"]
            print(f"\n[{broker.flavor}] broker redelivered {len(in_flight)} messages held by a "
                  f"stalled consumer {redelivery_s:.2f} s after the stall (heart-beat {HEARTBEAT_MS} "
                  f"ms), {len(redelivered)} flagged redelivered")
            if broker.flavor == "classic":  # Artemis: not always flagged (README, Flavors)
                assert len(redelivered) == len(in_flight), redelivered
            assert redelivery_s <= 4 * HEARTBEAT_MS / 1000 + 2.0
            wait_for(lambda: len({i for _, i, _ in fresh.frames} | in_flight) == 50, 30, "every message")
        finally:
            close_connection(other)
            close_connection(conn)
