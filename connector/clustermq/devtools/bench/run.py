"""``clustermq bench`` / ``make bench``: every comparison of the benchmark in one process.

Starts its own 3-node local cluster (stopped at the end, also on failure), one local Spark
session, then runs the scenarios in a fixed order and writes ``results.json``, the Markdown
table and the plots. ``--scale`` shrinks every message count (the test suite's smoke run uses a
tiny scale so the script cannot rot).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from clustermq.devtools.bench import report
from clustermq.devtools.bench.delta_run import read_into_delta
from clustermq.devtools.bench.scenarios import (
    Bench,
    Figure,
    drain_quietly,
    read_connector,
    read_raw,
    write_connector,
    write_raw,
)
from clustermq.devtools.bench.transport import compare_transports
from clustermq.devtools.localcluster import LocalCluster
from clustermq.pipelines.delta_jars import delta_jars
from clustermq.pipelines.delta_session import delta_session
from clustermq.pipelines.session import LOCAL_TUNING, job_session

BASE_MESSAGES = 200_000
MEMORY_MESSAGES = 1_000_000
SWEEP = (1_000, 5_000, 20_000, 50_000)
READ_MAX_PER_TRIGGER = 20_000
MEMORY_MAX_PER_TRIGGER = 10_000
STEPS = ("write", "read", "delta", "scaling", "sweep", "memory", "transport")
#: the transport comparison reads this share of the base backlog per read (2 x 3 reads)
TRANSPORT_SHARE = 0.25


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _machine() -> str:
    cores = os.cpu_count() or 0
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            mem_kib = int(handle.readline().split()[1])
        mem = f"{mem_kib / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        mem = "? GiB"
    return f"{platform.machine()}, {cores} cores, {mem}, Python {platform.python_version()}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="clustermq bench", description=__doc__)
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiply every message count (1.0 = the full sizes)")
    p.add_argument("--out", default="bench-results", help="directory for results.json and plots")
    p.add_argument("--doc", default=None,
                   help="also write the Markdown table here (make bench: docs/benchmarks.md)")
    p.add_argument("--dir", default=".cache/bench/cluster", help="directory of the bench's cluster")
    p.add_argument("--no-delta", action="store_true", help="skip the queue_to_delta run")
    p.add_argument("--steps", default=",".join(STEPS),
                   help=f"comma-separated subset of {', '.join(STEPS)} (default: all)")
    return p.parse_args(argv)


def _count(base: int, scale: float, minimum: int = 300) -> int:
    return max(minimum, int(base * scale))


def run(
    args: argparse.Namespace, cluster: LocalCluster | None = None, spark: SparkSession | None = None
) -> dict[str, Any]:
    """Run the selected steps; ``cluster``/``spark`` may be given (the smoke test shares its
    session's), else the bench starts and stops its own."""
    out = Path(args.out)
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    n = _count(BASE_MESSAGES, args.scale)
    started = time.monotonic()
    steps: list[tuple[str, Callable[[], None]]] = []
    results: dict[str, Any] = {"comparisons": [], "scaling": [], "batch_size": [], "notes": []}

    own_cluster, own_spark = cluster is None, spark is None
    if cluster is None:
        cluster = LocalCluster(Path(args.dir))
        _say(f"starting a 3-node cluster in {args.dir}")
        cluster.up(nodes=3, progress=_say)
    try:
        username, password = cluster.credentials
        nodes = list(cluster.nodes())
        use_delta = not args.no_delta and _delta_available()
        conf = {**LOCAL_TUNING, "spark.ui.enabled": "false", "spark.log.level": "WARN",
                "spark.sql.streaming.numRecentProgressUpdates": "100000",
                "spark.sql.shuffle.partitions": "3"}
        if spark is not None:
            use_delta = use_delta and "delta" in (spark.conf.get("spark.sql.extensions") or "").lower()
        elif use_delta:
            spark = delta_session("clustermq-bench", extra_conf=conf)
        else:
            spark = job_session("clustermq-bench", extra_conf=conf)
        jvm = spark.sparkContext._jvm
        assert jvm is not None  # set while the session runs
        jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
        b = Bench(nodes, username, password, spark, work, _say)
        results["environment"] = {
            "date": _dt.date.today().isoformat(), "machine": _machine(), "nodes": len(nodes),
            "flavor": cluster.state().flavor, "scale": args.scale, "messages": n,
            "body_size": b.body_size, "groups": b.groups,
        }
        comparisons: list[Figure] = []

        def write_pair() -> None:
            raw, queue = write_raw(b, n)
            comparisons.append(raw)
            _say(f"  {raw.name}: {raw.rate:,.0f} msg/s")
            raw_read = read_raw(b, queue, n)
            comparisons.append(raw_read)
            _say(f"  {raw_read.name}: {raw_read.rate:,.0f} msg/s")
            cmq, queue = write_connector(b, n)
            comparisons.append(cmq)
            _say(f"  {cmq.name}: {cmq.rate:,.0f} msg/s")
            drain_quietly(b, queue, n)

        def read_step(what: str, measure: Callable[[Bench, str, int, int], Figure]) -> Callable[[], None]:
            def step() -> None:
                queue = b.new_queue(what)
                b.preload(queue, n)
                fig = measure(b, queue, n, READ_MAX_PER_TRIGGER)
                comparisons.append(fig)
                _say(f"  {fig.name}: {fig.rate:,.0f} msg/s")
            return step

        def scaling() -> None:
            count = _count(BASE_MESSAGES // 2, args.scale)
            for k in (1, 2, 3):
                queue = b.new_queue(f"scale{k}")
                b.preload(queue, count, nodes[:k])
                fig = read_connector(b, queue, count, READ_MAX_PER_TRIGGER, nodes[:k],
                                     name=f"read: {k} node(s)")
                results["scaling"].append({**_slim(fig), "nodes": k})
                _say(f"  {k} node(s): {fig.rate:,.0f} msg/s")
            one = results["scaling"][0]["messages_per_s"]
            for row in results["scaling"]:
                row["ratio_to_one_node"] = report.ratio(row["messages_per_s"], one)

        def sweep() -> None:
            count = _count(BASE_MESSAGES // 2, args.scale)
            for size in SWEEP:
                queue = b.new_queue(f"sweep{size}")
                b.preload(queue, count)
                fig = read_connector(b, queue, count, size, name=f"maxMessagesPerTrigger={size}")
                results["batch_size"].append(_slim(fig))
                _say(f"  maxMessagesPerTrigger={size}: {fig.rate:,.0f} msg/s, "
                     f"p50 {fig.extra.get('batch_ms_p50')} ms, p95 {fig.extra.get('batch_ms_p95')} ms")

        def memory() -> None:
            count = _count(MEMORY_MESSAGES, args.scale)
            queue = b.new_queue("memory")
            b.preload(queue, count)
            fig = read_connector(b, queue, count, MEMORY_MAX_PER_TRIGGER, name="memory drain",
                                 memory_jvm_pid=jvm_pid)
            results["memory"] = {**_slim(fig, keep_memory=True)}
            _say(f"  drained {count:,}: peak RSS reader {fig.extra.get('peak_rss_reader_mib')} MiB, "
                 f"JVM {fig.extra.get('peak_rss_jvm_mib')} MiB")

        def transport() -> None:
            results["transport"] = compare_transports(
                b, cluster.amqp_brokers, _count(int(BASE_MESSAGES * TRANSPORT_SHARE), args.scale),
                READ_MAX_PER_TRIGGER)
            _say(f"  AMQP / STOMP: median {results['transport']['ratio_median']}, "
                 f"range {results['transport']['ratio_range']}")

        wanted = {s.strip() for s in args.steps.split(",") if s.strip()}
        unknown = wanted - set(STEPS)
        if unknown:
            raise SystemExit(f"unknown --steps {sorted(unknown)}; allowed: {', '.join(STEPS)}")
        if "write" not in wanted:
            raise SystemExit("--steps must include 'write': it measures the raw baselines")
        every = {"write": ("write: raw vs clustermq (and the raw read)", write_pair),
                 "read": ("read: clustermq reader into noop", read_step("read-noop", read_connector)),
                 "delta": ("read: queue_to_delta into a Delta table", read_step("read-delta", read_into_delta)),
                 "scaling": ("scaling over 1, 2, 3 nodes", scaling),
                 "sweep": ("batch-size sweep", sweep),
                 "memory": ("memory while draining the large backlog", memory),
                 "transport": ("read: STOMP vs AMQP transport, same backlog", transport)}
        if "delta" in wanted and not use_delta:
            wanted.discard("delta")
            results["notes"].append("queue_to_delta run skipped (no Delta jars or --no-delta)")
        steps = [every[name] for name in STEPS if name in wanted]
        for i, (title, step) in enumerate(steps, 1):
            _say(f"[{i}/{len(steps)}] {title} (elapsed {time.monotonic() - started:.0f} s)")
            step()

        raw_read = next(f for f in comparisons if f.name.startswith("read: raw"))
        raw_write = next(f for f in comparisons if f.name.startswith("write: raw"))
        for fig in comparisons:
            base = raw_read if fig.name.startswith("read") else raw_write
            row = fig.as_json()
            row["ratio_to_raw"] = report.ratio(fig.rate, base.rate)
            results["comparisons"].append(row)
        results["environment"]["seconds"] = round(time.monotonic() - started, 1)
        if own_spark:
            spark.stop()
    finally:
        if own_cluster:
            cluster.down()
    return results


def _slim(fig: Figure, keep_memory: bool = False) -> dict[str, Any]:
    row = fig.as_json()
    row.pop("depth_series", None)
    if not keep_memory:
        row.pop("memory_series", None)
    return row


def _delta_available() -> bool:
    """Whether the pinned Delta jars are cached (``make setup``); the bench never fetches them."""
    try:
        return bool(delta_jars())
    except (RuntimeError, OSError):  # DeltaJarsMissing is a RuntimeError, as is an unpinned pom
        return False


def main(
    argv: list[str] | None = None, cluster: LocalCluster | None = None, spark: SparkSession | None = None
) -> int:
    args = parse_args(argv)
    results = run(args, cluster, spark)
    out = Path(args.out)
    report.write_json(results, out / "results.json")
    images = report.plots(results, out)
    _say(f"wrote {out / 'results.json'} and {len(images)} plot(s)")
    if args.doc:
        doc = Path(args.doc)
        names = []
        for image in images:
            target = doc.parent / image.name
            if target.resolve() != image.resolve():
                shutil.copyfile(image, target)
            names.append(image.name)
        doc.write_text(report.markdown(results, names), encoding="utf-8")
        _say(f"wrote {doc}")
    for row in results["comparisons"]:
        _say(f"{row['name']:<40} {row['messages_per_s']:>10,.0f} msg/s  ratio {row['ratio_to_raw']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
