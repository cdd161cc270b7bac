"""``clustermq bench`` / ``make bench``: every comparison of the benchmark in one process.

Per flavor it starts its own 3-node local cluster (stopped at the end, also on failure) and runs
each comparison of ``pairs.PAIRS`` as alternating runs (baseline, candidate, baseline, ...), so a
slow phase of a shared machine hits both sides; a ratio is the median of the per-run ratios, with
its min and max (so are the transport and scale-out steps). The non-ratio steps (scaling, batch-size sweep, memory) run once, on the first
flavor. Writes ``results.json``, the Markdown tables, the plots and the README's headline.
``--scale`` shrinks every message count (the suite's smoke run uses a tiny scale).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from clustermq.devtools.arguments import positive_number
from clustermq.devtools.bench import extras, latency, plots, report
from clustermq.devtools.bench.comparisons import (
    PAIRS,
    READ_MAX_PER_TRIGGER,
    Pair,
    warm_up_delta,
    warm_up_reader,
    warm_up_writer,
)
from clustermq.devtools.bench.scaleout import scaleout
from clustermq.devtools.bench.scenarios import RAW_READ, Bench, Figure
from clustermq.devtools.bench.spread import median_item, median_range, named_range
from clustermq.devtools.bench.transport import compare_transports
from clustermq.devtools.localcluster import LocalCluster
from clustermq.devtools.localcluster.flavor_registry import FLAVORS
from clustermq.pipelines.delta_jars import delta_jars
from clustermq.pipelines.delta_session import delta_session
from clustermq.pipelines.spark_session import LOCAL_TUNING, job_session

BASE_MESSAGES = 200_000
MEMORY_MESSAGES = 1_000_000
EXTRA_STEPS = ("scaling", "sweep", "memory")
STEPS = tuple(p.key for p in PAIRS) + EXTRA_STEPS + ("transport", "scaleout", "latency")
#: the transport comparison reads this share of the base backlog per read (8 reads per flavor)
TRANSPORT_SHARE = 0.1


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
    p.add_argument("--readme", default=None,
                   help="also refresh the headline between the bench markers of this file")
    p.add_argument("--dir", default=".cache/bench/cluster", help="directory of the bench's clusters")
    p.add_argument("--flavors", default=",".join(FLAVORS),
                   help="comma-separated broker flavors, one cluster each (default: all)")
    p.add_argument("--repeats", type=int, default=3,
                   help="alternating baseline/candidate runs per comparison (default 3)")
    p.add_argument("--no-delta", action="store_true", help="skip the queue_to_delta run")
    p.add_argument("--latency-seconds", type=positive_number("--latency-seconds", "seconds"),
                   default=latency.SEND_SECONDS,
                   help="the latency step's timed sending per query and rate (default "
                        f"{latency.SEND_SECONDS:.0f}; --scale does not change it)")
    p.add_argument("--memory-messages", type=positive_number("--memory-messages", "messages"),
                   default=None,
                   help=f"the memory step's backlog (default {MEMORY_MESSAGES:,} x --scale); make "
                        "bench gives the full size, since a slow leak shows only over a long drain")
    p.add_argument("--steps", default=",".join(STEPS),
                   help=f"comma-separated subset of {', '.join(STEPS)} (default: all)")
    return p.parse_args(argv)


def _count(base: int, scale: float, minimum: int = 300) -> int:
    return max(minimum, int(base * scale))


def _cpu_medians(figs: list[Figure]) -> dict[str, float]:
    kinds = {k for f in figs for k in f.extra.get("cpu_us_per_msg", {})}
    return {k: round(statistics.median(f.extra.get("cpu_us_per_msg", {}).get(k, 0.0) for f in figs), 1)
            for k in sorted(kinds)}


def _row(figs: list[Figure], ratios: list[float | None], flavor: str, pair: Pair) -> dict[str, Any]:
    """One table row from repeated runs: the median run's figures, the ratio's median and range."""
    known = [r for r in ratios if r is not None]
    keys = [r or 0.0 for r in ratios] if known else [f.rate for f in figs]
    fig = figs[median_item(range(len(figs)), key=lambda i: keys[i])]
    row = fig.as_json()
    row.update(flavor=flavor, kind=pair.kind, repeats=len(figs),
               messages_per_s=round(statistics.median(f.rate for f in figs), 1),
               cpu_us_per_msg=_cpu_medians(figs),
               runs=[{"messages_per_s": round(f.rate, 1), "ratio": r, "seconds": round(f.seconds, 2),
                      **{k: f.extra[k] for k in ("first_batch_s", "depth_rise_max", "cpu_us_per_msg",
                                                 "batch_ms_p95", "stalled_with_left",
                                                 "after_first_batch_msgs_per_s") if k in f.extra}}
                     for f, r in zip(figs, ratios)])
    if known:
        median, low, high = median_range(known)
        row.update(ratio_to_raw=median, ratio_min=low, ratio_max=high)
    return row


def run_pairs(b: Bench, pairs: list[Pair], n: int, repeats: int, flavor: str) -> list[dict[str, Any]]:
    """Alternate each pair's baseline and candidate ``repeats`` times; one row per side (a
    baseline shared by several pairs is reported once, with the runs of its first pair)."""
    rows: list[dict[str, Any]] = []
    reported: set[str] = set()
    for pair in pairs:
        base_figs, cand_figs = [], []
        for i in range(repeats):
            b.say(f"  [{flavor}] {pair.key} run {i + 1}/{repeats}: baseline")
            base_figs.append(pair.baseline(b, n))
            b.say(f"  [{flavor}] {pair.key} run {i + 1}/{repeats}: candidate")
            cand_figs.append(pair.candidate(b, n))
            b.say(f"    {base_figs[-1].name}: {base_figs[-1].rate:,.0f} msg/s; "
                  f"{cand_figs[-1].name}: {cand_figs[-1].rate:,.0f} msg/s")
        ratios = [report.ratio(c.rate, s.rate) for s, c in zip(base_figs, cand_figs)]
        if base_figs[0].name not in reported:
            reported.add(base_figs[0].name)
            rows.append(_row(base_figs, [1.0] * repeats, flavor, pair))
        rows.append(_row(cand_figs, ratios, flavor, pair))
        steady = [r for s, c in zip(base_figs, cand_figs) if "after_first_batch_msgs_per_s" in c.extra
                  and (r := report.ratio(c.extra["after_first_batch_msgs_per_s"], s.rate)) is not None]
        rows[-1].update(named_range("after_first_batch_ratio", steady))
    return rows


def _session(spark: SparkSession | None, use_delta: bool) -> tuple[SparkSession, bool]:
    conf = {**LOCAL_TUNING, "spark.ui.enabled": "false", "spark.log.level": "WARN",
            "spark.sql.streaming.numRecentProgressUpdates": "100000",
            "spark.sql.shuffle.partitions": "3"}
    if spark is not None:
        return spark, use_delta and "delta" in (spark.conf.get("spark.sql.extensions") or "").lower()
    if use_delta:
        return delta_session("clustermq-bench", extra_conf=conf), True
    return job_session("clustermq-bench", extra_conf=conf), False


def run(
    args: argparse.Namespace, cluster: LocalCluster | None = None, spark: SparkSession | None = None
) -> dict[str, Any]:
    """Run the selected steps on every flavor; ``cluster``/``spark`` may be given (the smoke test
    shares its session's, and then runs that cluster's flavor only), else the bench starts and
    stops its own."""
    out = Path(args.out)
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    n = _count(BASE_MESSAGES, args.scale)
    started = time.monotonic()
    wanted = {s.strip() for s in args.steps.split(",") if s.strip()}
    unknown = wanted - set(STEPS)
    if unknown:
        raise SystemExit(f"unknown --steps {sorted(unknown)}; allowed: {', '.join(STEPS)}")
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1")
    flavors = [cluster.state().flavor] if cluster else [f.strip() for f in args.flavors.split(",") if f.strip()]
    bad = set(flavors) - set(FLAVORS)
    if bad:
        raise SystemExit(f"unknown --flavors {sorted(bad)}; allowed: {', '.join(FLAVORS)}")
    results: dict[str, Any] = {"comparisons": [], "scaling": [], "batch_size": [], "notes": []}
    own_spark = spark is None
    spark, use_delta = _session(spark, not args.no_delta and _delta_available())
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None  # set while the session runs
        jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
        pairs = [p for p in PAIRS if p.key in wanted and (use_delta or not p.needs_delta)]
        if any(p.needs_delta and p.key in wanted for p in PAIRS) and not use_delta:
            results["notes"].append("queue_to_delta run skipped (no Delta jars or --no-delta)")
        for step in ("scaleout", "latency"):
            if step in wanted and not use_delta:
                results["notes"].append(f"{step} step skipped (no Delta jars or --no-delta)")
        results["environment"] = {
            "date": _dt.date.today().isoformat(), "machine": _machine(), "flavors": flavors,
            "scale": args.scale, "messages": n, "repeats": args.repeats,
        }
        for index, flavor in enumerate(flavors):
            cl = cluster or LocalCluster(Path(args.dir) / flavor)
            if cluster is None:
                _say(f"starting a 3-node {flavor} cluster in {Path(args.dir) / flavor}")
                cl.up(nodes=3, flavor=flavor, progress=_say)
            try:
                username, password = cl.credentials
                b = Bench(list(cl.nodes()), username, password, spark, work, _say, jvm_pid=jvm_pid,
                          broker_pids=tuple(n.pid for n in cl.state().nodes if n.pid is not None))
                results["environment"].update(nodes=len(b.nodes), body_size=b.body_size, groups=b.groups)
                _say(f"[{flavor}] comparisons (elapsed {time.monotonic() - started:.0f} s)")
                if any(p.kind == "write" for p in pairs):
                    warm_up_writer(b)
                if any(p.kind == "read" for p in pairs):
                    warm_up_reader(b)
                if any(p.needs_delta for p in pairs) or (use_delta and wanted & {"scaleout", "latency"}):
                    warm_up_delta(b)
                results["comparisons"] += run_pairs(b, pairs, n, args.repeats, flavor)
                if "transport" in wanted:
                    _say(f"[{flavor}] transport (elapsed {time.monotonic() - started:.0f} s)")
                    results.setdefault("transport", {})[flavor] = compare_transports(
                        b, cl.amqp_brokers, _count(int(BASE_MESSAGES * TRANSPORT_SHARE), args.scale),
                        READ_MAX_PER_TRIGGER, rounds=args.repeats)
                if "scaleout" in wanted and use_delta:
                    _say(f"[{flavor}] scaleout (elapsed {time.monotonic() - started:.0f} s)")
                    results.setdefault("scaleout", []).extend(scaleout(
                        b, _count(BASE_MESSAGES, args.scale), args.repeats, flavor))
                if "latency" in wanted and use_delta:
                    _say(f"[{flavor}] latency (elapsed {time.monotonic() - started:.0f} s)")
                    raw = next((r["messages_per_s"] for r in results["comparisons"]
                                if r["flavor"] == flavor and r["name"] == RAW_READ), None)
                    results.setdefault("latency", []).extend(latency.latency(
                        b, raw or latency.raw_read_rate(b, n), args.latency_seconds, flavor))
                if index == 0:
                    results["extras_flavor"] = flavor
                    for step, count in (("scaling", BASE_MESSAGES // 2), ("sweep", BASE_MESSAGES // 2),
                                        ("memory", MEMORY_MESSAGES)):
                        if step in wanted:
                            _say(f"[{flavor}] {step} (elapsed {time.monotonic() - started:.0f} s)")
                            size = (int(args.memory_messages) if step == "memory" and args.memory_messages
                                    else _count(count, args.scale))
                            getattr(extras, step)(b, size, results)
            finally:
                if cluster is None:
                    cl.down()
        results["environment"]["seconds"] = round(time.monotonic() - started, 1)
    finally:
        if own_spark:
            spark.stop()
    return results


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
    images = plots.plots(results, out)
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
    if args.readme:
        report.refresh_headline(Path(args.readme), results)
        _say(f"refreshed the headline in {args.readme}")
    for row in results["comparisons"]:
        _say(f"[{row['flavor']}] {row['name']:<40} {row['messages_per_s']:>10,.0f} msg/s  "
             f"ratio {row.get('ratio_to_raw')} ({row.get('ratio_min')}-{row.get('ratio_max')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
