"""``clustermq demo``: the README's one-command tour of the read path.

Starts a local cluster, produces grouped messages with a plain stomp.py producer, drains them
with a ``Trigger.AvailableNow`` query into Parquet (recording each row's Spark partition), and
prints a report that checks itself: distinct ids, rows per node, groups per partition, depth.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .depth import queue_depths
from .loadgen import LoadSpec, print_progress, produce
from .options import parse_connection_options


def _say(text: str) -> None:
    print(text, flush=True)


def run_demo(args: argparse.Namespace) -> int:
    from .localcluster.cluster import LocalCluster

    work = Path(tempfile.mkdtemp(prefix="clustermq-demo-"))
    cluster_dir = Path(args.dir) if args.dir else work / "cluster"
    cluster = LocalCluster(cluster_dir)
    started = time.monotonic()
    try:
        _say(f"starting a {args.nodes}-node cluster in {cluster_dir} ...")
        cluster.up(nodes=args.nodes)
        username, password = cluster.credentials
        brokers = cluster.brokers
        _say(f"brokers: {brokers}")
        queue = "demo.orders"
        conn = parse_connection_options(
            {"brokers": brokers, "queue": queue, "username": username, "password": password}
        )
        _say(f"producing {args.count} persistent messages with {args.groups} groups ...")
        produce(conn, LoadSpec(count=args.count, groups=args.groups), progress=print_progress)
        report = drain_with_spark(
            brokers, queue, username, password, work, args.max_messages_per_trigger
        )
        depths = queue_depths(list(conn.nodes), queue, username, password)
        ok = _print_report(args.count, report, depths, time.monotonic() - started)
        return 0 if ok else 1
    finally:
        if not args.keep:
            cluster.down()
            shutil.rmtree(work, ignore_errors=True)


def drain_with_spark(
    brokers: str, queue: str, username: str | None, password: str | None, work: Path,
    max_messages_per_trigger: int,
) -> dict[str, object]:
    from pyspark.sql import functions as F

    from .session import local_session

    spark = local_session("clustermq-demo")
    out = work / "out"
    reader = (
        spark.readStream.format("clustermq")
        .option("brokers", brokers)
        .option("queue", queue)
        .option("maxMessagesPerTrigger", str(max_messages_per_trigger))
    )
    if username:
        reader = reader.option("username", username).option("password", password or "")
    df = reader.load().withColumn("partition", F.spark_partition_id())

    def write_batch(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        batch.withColumn("batch_id", F.lit(batch_id)).write.mode("append").parquet(str(out))

    _say("draining with Trigger.AvailableNow ...")
    query = (
        df.writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    while query.isActive:
        progress = query.lastProgress
        if progress:
            _say(f"  batch {progress['batchId']}: {progress['numInputRows']} rows")
        query.awaitTermination(2)
    if query.exception():
        raise RuntimeError(f"streaming query failed: {query.exception()}")
    rows = spark.read.parquet(str(out))
    per_node = {r["node"]: r["count"] for r in rows.groupBy("node").count().collect()}
    split_groups = (
        rows.where("group_id is not null")
        .groupBy("batch_id", "group_id")
        .agg(F.countDistinct("partition").alias("p"))
        .where("p > 1")
        .count()
    )
    return {
        "rows": rows.count(),
        "distinct_ids": rows.select("message_id").distinct().count(),
        "per_node": per_node,
        "batches": rows.select("batch_id").distinct().count(),
        "groups_split_across_partitions": split_groups,
    }


def _print_report(
    produced: int, report: dict[str, object], depths: dict[str, int | None], elapsed: float
) -> bool:
    _say("")
    _say("clustermq demo report")
    _say(f"  messages produced        {produced}")
    _say(f"  rows read                {report['rows']}")
    _say(f"  distinct message ids     {report['distinct_ids']}")
    _say(f"  micro-batches            {report['batches']}")
    per_node = report["per_node"]
    assert isinstance(per_node, dict)
    for node, count in sorted(per_node.items()):
        _say(f"  rows from {node:<22} {count}")
    _say(f"  groups split per batch   {report['groups_split_across_partitions']}")
    for node, depth in depths.items():
        _say(f"  depth after on {node:<16} {depth}")
    _say(f"  elapsed                  {elapsed:.1f} s")
    ok = (
        report["distinct_ids"] == produced
        and report["groups_split_across_partitions"] == 0
        and all(d == 0 for d in depths.values())
    )
    _say("  result                   " + ("OK" if ok else "MISMATCH"))
    return ok


if __name__ == "__main__":
    from .cli import main

    sys.exit(main(["demo", *sys.argv[1:]]))
