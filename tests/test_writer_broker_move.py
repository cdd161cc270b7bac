"""The atomic writer's commit moving inside the broker (write/broker_move.py), and its fallback.

Where the login may manage queues (Artemis with ``manage``), every task attempt stages into its
own queues and the commit moves them with the broker's ``moveMessages``; otherwise (Classic, an
Artemis login without ``manage``) the move goes over STOMP. Driven below Spark (``write_task``
and the write mode's ``commit``/``abort`` as Spark calls them) so the attempts, winners and
losers are exact; the queue is read back with the streaming reader.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from clustermq.groups import bucket_for_group
from clustermq.options import WriteOptions
from clustermq.write.layout import InputLayout
from clustermq.write.modes import AttemptStaging, JobStaging, choose_mode
from clustermq.write.task import TaskIdentity, write_task
from test_reader import new_queue
from test_writer import names, read_back_in_arrival_order, staging_queues

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

GROUPS = 12
LAYOUT = InputLayout(body="body", body_is_text=True, group_id="grp")


def grouped(partition: int, rows: int, batches: int = 2) -> Iterator[pa.RecordBatch]:
    """``rows`` rows of partition ``partition`` in ``batches`` Arrow batches; body ``p<p>-<i>``,
    group ``g<i % GROUPS>``, so a group's rows of one partition are in body order."""
    size = rows // batches
    for b in range(batches):
        ids = range(b * size, (b + 1) * size)
        yield pa.RecordBatch.from_arrays(
            [pa.array([f"p{partition}-{i}" for i in ids]), pa.array([f"g{i % GROUPS}" for i in ids])],
            names=["body", "grp"])


def options_for(broker, queue: str, username: str | None = None) -> WriteOptions:
    user, password = broker.cluster.credentials
    return WriteOptions.parse({"brokers": broker.cluster.brokers, "queue": queue,
                               "username": username or user, "password": password,
                               "receiptTimeout": "20000"})


def no_staging_left(broker, queue: str) -> None:
    left = {node: {q: d for q, d in queues.items() if d} for node, queues in staging_queues(broker, queue).items()}
    assert left == {n: {} for n in names(broker)}, f"staging queues still holding messages: {left}"


def check_queue(spark: SparkSession, broker, queue: str, rows: dict[int, int], work: Path) -> list:
    """Every row once, each group on the node its hash names, in each partition's order."""
    nodes = names(broker)
    got = read_back_in_arrival_order(spark, broker, queue, work).select(
        F.col("body").cast("string").alias("body"), "group_id", "node", "batch_id", "position",
        F.col("headers").alias("headers")).orderBy("batch_id", "position").collect()
    bodies = Counter(r["body"] for r in got)
    assert bodies == Counter(f"p{p}-{i}" for p, n in rows.items() for i in range(n)), \
        f"{sum(bodies.values())} rows read, {len(bodies)} distinct"
    seen: dict[tuple[str, str], int] = {}
    for r in got:
        assert r["node"] == nodes[bucket_for_group(r["group_id"], len(nodes))], r
        partition, index = r["body"].split("-")
        key = (r["group_id"], partition)
        assert seen.get(key, -1) < int(index), f"group {key} out of order at {r['body']}"
        seen[key] = int(index)
    return got


def test_commit_moves_inside_the_broker_once_per_message_on_its_node_in_group_order(
    spark: SparkSession, broker, tmp_path: Path
) -> None:
    """Two winning tasks and a failed attempt that staged part of partition 1. Where the login
    may manage queues the commit's move is the broker's (every message counted as moved inside
    it), elsewhere STOMP's; either way every row arrives once, on its group's node, in order,
    the failed attempt's messages are dropped and no staging queue of the job holds anything."""
    queue = new_queue("wbmove")
    options = options_for(broker, queue)
    mode = choose_mode(options)
    in_broker = mode == AttemptStaging()
    assert in_broker == (broker.flavor == "artemis")
    job = uuid.uuid4().hex
    loser = write_task(options, LAYOUT, TaskIdentity(job, 0, 1, 0), grouped(1, 400), mode)
    tasks = [write_task(options, LAYOUT, TaskIdentity(job, 0, p, 1), grouped(p, 3000), mode)
             for p in (0, 1)]
    assert sum(sum(m.counts.values()) for m in [loser, *tasks]) == 6400
    results = mode.commit(options, f"job {job}", job, tasks)
    assert sum(r.moved for r in results) == 6000
    assert sum(r.in_broker for r in results) == (6000 if in_broker else 0), results
    assert sum(r.dropped for r in results) == 400, results  # the failed attempt's
    no_staging_left(broker, queue)
    if in_broker:  # the attempts' own queues are destroyed, not only emptied
        assert staging_queues(broker, queue) == {n: {} for n in names(broker)}
    got = check_queue(spark, broker, queue, {0: 3000, 1: 3000}, tmp_path)
    hidden = {k for r in got for k in r["headers"] if k in ("clustermq_task", "clustermq_target")}
    assert not hidden, f"staging-only headers on delivered messages: {hidden}"
    print(f"\n[{broker.flavor}] 6,000 moved ({sum(r.in_broker for r in results)} inside the broker) "
          f"in {max(r.seconds for r in results):.2f} s; 400 of a failed attempt dropped")


@pytest.mark.flavors("artemis")
def test_a_rerun_batchs_copies_are_dropped_by_the_broker_after_a_move_inside_it(broker) -> None:
    """A streaming batch re-run (same query, batch and partition: same ``clustermq_id``s) is
    staged by a new attempt into its own queue; the broker's move drops every copy whose id the
    queue already has (``_AMQ_DUPL_ID`` travels with the staged copy), and moves the rest."""
    queue = new_queue("wbrerun")
    options = options_for(broker, queue)
    mode = choose_mode(options)
    assert mode == AttemptStaging()
    query = uuid.uuid4().hex
    first = write_task(options, LAYOUT, TaskIdentity(query, 7, 0, 0), grouped(0, 2000), mode)
    mode.commit(options, f"query {query} batch 7", query, [first])
    assert sum(d or 0 for d in broker.depths(queue).values()) == 2000
    rerun = write_task(options, LAYOUT, TaskIdentity(query, 7, 0, 1), grouped(0, 3000, batches=3), mode)
    results = mode.commit(options, f"query {query} batch 7", query, [rerun])
    assert sum(r.in_broker for r in results) == 3000, results
    assert sum(d or 0 for d in broker.depths(queue).values()) == 3000  # 2,000 copies dropped
    no_staging_left(broker, queue)


def test_without_manage_the_commit_moves_over_stomp(spark: SparkSession, broker, tmp_path: Path) -> None:
    """A login the broker denies management (Artemis: the local cluster's ``<user>-nomanage``;
    Classic: any login, it has no management over STOMP) stages per job and moves over STOMP,
    dropping a failed attempt's messages (staged before the winner's) by its task header."""
    user = broker.cluster.credentials[0]
    queue = new_queue("wbstomp")
    options = options_for(broker, queue, f"{user}-nomanage" if broker.flavor == "artemis" else None)
    mode = choose_mode(options)
    assert mode == JobStaging()
    job = uuid.uuid4().hex
    loser = write_task(options, LAYOUT, TaskIdentity(job, 0, 0, 0), grouped(0, 300), mode)
    winner = write_task(options, LAYOUT, TaskIdentity(job, 0, 0, 1), grouped(0, 2000), mode)
    assert loser.mode == winner.mode == JobStaging()
    results = mode.commit(options, f"job {job}", job, [winner])
    assert sum(r.moved for r in results) == 2000 and not any(r.in_broker for r in results), results
    assert sum(r.dropped for r in results) == 300, results
    no_staging_left(broker, queue)
    check_queue(spark, broker, queue, {0: 2000}, tmp_path)


@pytest.mark.flavors("artemis")
def test_abort_destroys_every_attempts_own_staging_queue(broker) -> None:
    """``abort`` of a job whose attempts staged into their own queues (two tasks, one of them
    retried) destroys them all: nothing of the job is left on any node, nothing in the queue."""
    queue = new_queue("wbabort")
    options = options_for(broker, queue)
    job = uuid.uuid4().hex
    mode = AttemptStaging()
    staged = [write_task(options, LAYOUT, TaskIdentity(job, 0, p, a), grouped(p, 600), mode)
              for p, a in ((0, 0), (0, 1), (1, 0))]
    assert all(m.mode == mode for m in staged)
    mode.abort(options, f"job {job}", job, staged[1:])
    assert staging_queues(broker, queue) == {n: {} for n in names(broker)}
    assert sum(d or 0 for d in broker.depths(queue).values()) == 0
