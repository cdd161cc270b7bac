"""The bench's ``latency`` step: how long a message takes from its producer to a committed batch.

A paced producer (the load generator with ``LoadSpec.rate``) sends at a steady rate into a
query that is already running with ``processingTime`` 1 s, and stamps each message with its send
time (``loadgen_sent_ms``). A message's latency is the moment its batch committed in the sink
minus that stamp:

* **reader**: the reader into a ``foreachBatch`` that only fetches the batch's send times and
  counts them in 10 ms buckets (the least work that still reads the batch). Its batch committed
  when Spark's progress says the trigger ended, after the commit log was written.
* **queue_to_delta**: the reader into the job's exactly-once Delta sink. A row committed when its
  Delta version's log file appeared (its mtime), the moment readers of the table can see it;
  rows are mapped to versions through the data file that holds them.

The rates are shares of the raw stomp.py consumers' rate measured in the same run (the read
comparison's baseline when it ran, else a raw drain here). Each run first sends at its rate for
``WARM_UP_S``, untimed, and waits for that to commit: a query's first batches pay its start (the
reader process, the first plans, a new Delta table), which a long-running query pays once; a
300-message warm-up left the session's first query at a p50 of 7 s where later ones had 1.8 s.
The p99 of the first and of the last third of the timed sending (20 s each at the default 60 s)
tell a query that keeps up (equal) from one that falls behind (the last grows).
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from clustermq.devtools.bench.probes import MachineLoad
from clustermq.devtools.bench.scenarios import Bench, end_seconds, read_raw
from clustermq.devtools.loadgen import LoadSpec, produce
from clustermq.pipelines.delta_sink import IdempotentDeltaWriter

#: offered rates as shares of the raw consumers' rate; the first is the ``low_rate`` row
RATE_SHARES = (0.25, 0.5)
QUERIES = ("reader", "queue_to_delta")
#: the timed sending per query and rate (``--latency-seconds``)
SEND_SECONDS = 60.0
TRIGGER = "1 second"
#: the reader's batch limit here: none (its default), so a batch takes what arrived in a second
#: and the limit never adds latency; the window (``prefetchPerNode``) bounds it instead
PREFETCH_PER_NODE = 20_000
BUCKET_MS = 10
#: untimed sending at the run's rate before the timed part (see the module's docstring)
WARM_UP_S = 10.0
#: how long the run waits for the last message after the producer stopped, on top of the
#: sending time (a query that fell behind needs that long to catch up)
CATCH_UP_S = 120.0
#: the goals at the low rate (p99, ms)
GOALS_MS = {"reader": 2_500, "queue_to_delta": 4_000}


def _sent_bucket() -> Column:
    """A row's send-time bucket (null for a message the paced producer did not stamp)."""
    return F.floor(F.col("headers")["loadgen_sent_ms"].cast("long") / BUCKET_MS)


@dataclass
class Latencies:
    """Weighted samples ``(sent_ms, latency_ms, messages)`` of one run."""

    samples: list[tuple[float, float, int]] = field(default_factory=list)

    def add(self, buckets: list[tuple[int, int]], committed_ms: float) -> None:
        """``buckets``: (send-time bucket, messages) of a batch that committed at ``committed_ms``."""
        for bucket, count in buckets:
            sent = (bucket + 0.5) * BUCKET_MS
            self.samples.append((sent, committed_ms - sent, count))

    @property
    def messages(self) -> int:
        return sum(c for _, _, c in self.samples)

    def since(self, start_ms: float) -> Latencies:
        """The samples of the messages sent in a bucket that starts at or after ``start_ms``."""
        return Latencies([s for s in self.samples if s[0] - BUCKET_MS / 2 >= start_ms])

    def percentile(self, q: float, start_ms: float | None = None, end_ms: float | None = None) -> float | None:
        """The ``q`` quantile (0..1) of the latency of messages sent in [start_ms, end_ms)."""
        picked = sorted((lat, c) for sent, lat, c in self.samples
                        if (start_ms is None or sent >= start_ms) and (end_ms is None or sent < end_ms))
        total = sum(c for _, c in picked)
        if not total:
            return None
        rank, seen = q * total, 0
        for lat, c in picked:
            seen += c
            if seen >= rank:
                return round(lat, 1)
        return round(picked[-1][0], 1)


def summary(lat: Latencies, sent_from_ms: float, sent_to_ms: float) -> dict[str, Any]:
    """The p50/p95/p99 of every message, and the p99 of the first and the last third."""
    third = (sent_to_ms - sent_from_ms) / 3
    return {"p50_ms": lat.percentile(0.5), "p95_ms": lat.percentile(0.95), "p99_ms": lat.percentile(0.99),
            "p99_first_ms": lat.percentile(0.99, end_ms=sent_from_ms + third),
            "p99_last_ms": lat.percentile(0.99, start_ms=sent_to_ms - third),
            "window_s": round(third / 1000, 1)}


class _BatchCounter:
    """The reader query's ``foreachBatch``: send-time buckets and rows per batch.

    It fetches one column as Arrow and counts in the driver: no shuffle, so the query's batches
    cost what reading them costs (a ``groupBy`` count added a shuffle stage to every batch).
    """

    def __init__(self) -> None:
        self.buckets: dict[int, list[tuple[int, int]]] = {}
        self.rows: dict[int, int] = {}
        self._lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        column = df.select(_sent_bucket().alias("bucket")).toArrow().column("bucket")
        counts = pc.value_counts(column.drop_null())
        with self._lock:
            self.buckets[batch_id] = [(int(c["values"].as_py()), int(c["counts"].as_py())) for c in counts]
            self.rows[batch_id] = len(column)

    def committed(self, ended: Callable[[], set[int]]) -> int:
        """Rows of the batches that ``ended()`` lists (those with a progress report: committed).

        Not the rows ``foreachBatch`` saw: it runs before Spark commits the batch and reports
        its progress, and a query stopped in between leaves that batch with no end time: its
        messages would count as not committed, and the run's percentiles as lower bounds (≥)."""
        with self._lock:
            rows = dict(self.rows)
        if not rows:
            return 0
        done = ended()
        return sum(n for batch_id, n in rows.items() if batch_id in done)


def _reader_latencies(query: StreamingQuery, counter: _BatchCounter) -> Latencies:
    ends = {p.batchId: end_seconds(p) * 1000 for p in query.recentProgress}
    lat = Latencies()
    for batch_id, buckets in counter.buckets.items():
        if batch_id in ends:
            lat.add(buckets, ends[batch_id])
    return lat


def _delta_latencies(b: Bench, table: Path) -> Latencies:
    """Rows of the table by data file and send-time bucket, each file at its version's commit."""
    committed: dict[str, float] = {}
    for log_file in sorted((table / "_delta_log").glob("*.json")):
        at = log_file.stat().st_mtime * 1000
        for line in log_file.read_text(encoding="utf-8").splitlines():
            add = json.loads(line).get("add")
            if add:
                committed[Path(add["path"]).name] = at
    counts = (b.spark.read.format("delta").load(str(table))
              .select(F.col("_metadata.file_name").alias("file"), _sent_bucket().alias("bucket"))
              .where(F.col("bucket").isNotNull()).groupBy("file", "bucket").count().collect())
    per_file: dict[str, list[tuple[int, int]]] = {}
    for r in counts:
        per_file.setdefault(r["file"], []).append((int(r["bucket"]), int(r["count"])))
    lat = Latencies()
    for name, buckets in per_file.items():
        lat.add(buckets, committed[name])
    return lat


def _wait_committed(committed: Callable[[], int], wanted: int, timeout: float, what: str,
                    query: StreamingQuery) -> bool:
    """Poll until ``committed()`` reaches ``wanted`` (True) or ``timeout`` passed (False)."""
    deadline = time.monotonic() + timeout
    while committed() < wanted:
        if query.exception() is not None:
            raise RuntimeError(f"latency: the query failed waiting for {what}: {query.exception()}")
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def run_one(b: Bench, kind: str, rate: float, seconds: float) -> dict[str, Any]:
    """One query of ``kind`` on a fresh queue, fed ``rate`` msg/s for ``seconds``; its figures."""
    queue = b.new_queue(f"latency-{kind}")
    options = b.reader_options(queue, prefetchPerNode=PREFETCH_PER_NODE)
    checkpoint = str(b.work / f"cp-latency-{uuid.uuid4().hex[:8]}")
    stream = b.spark.readStream.format("clustermq").options(**options).load()
    table = b.work / f"latency-{uuid.uuid4().hex[:8]}"
    counter = _BatchCounter()
    sink = IdempotentDeltaWriter(str(table)) if kind == "queue_to_delta" else None

    def committed() -> int:
        if sink is not None:
            return sink.totals.written  # appended: the Delta version is the commit measured
        return counter.committed(lambda: {p.batchId for p in query.recentProgress if p.numInputRows})

    query = (stream.writeStream.foreachBatch(sink or counter).option("checkpointLocation", checkpoint)
             .trigger(processingTime=TRIGGER).start())
    try:
        if sink is not None:
            sink.set_app_id(f"clustermq-bench-{query.id}")
        warm = max(1, int(rate * WARM_UP_S))
        produce(b.connection(queue), LoadSpec(count=warm, size=b.body_size, rate=rate, transaction_size=200))
        if not _wait_committed(committed, warm, CATCH_UP_S, "the warm-up", query):
            raise RuntimeError(f"latency {kind}: {committed():,} of the {warm:,} warm-up messages "
                               f"committed in {CATCH_UP_S:.0f} s; last progress: {query.lastProgress}")
        timed_from_batch = query.lastProgress["batchId"] + 1 if query.lastProgress else 0
        count = max(1, int(rate * seconds))
        # after the warm-up committed, so every warm-up message is in an earlier bucket (since())
        sent_from = time.time() * 1000
        with MachineLoad() as machine, b.cpu() as cpu:
            produce(b.connection(queue), LoadSpec(count=count, size=b.body_size, rate=rate,
                                                  first_id=warm, transaction_size=200))
            sent_to = time.time() * 1000
            _wait_committed(committed, warm + count, CATCH_UP_S + seconds, "the timed messages", query)
    finally:
        query.stop()
    stopped = time.time() * 1000
    lat = (_delta_latencies(b, table) if sink is not None else _reader_latencies(query, counter)).since(sent_from)
    # A query that fell too far behind is stopped with messages not committed: each counts with
    # the least latency it can have had (sent by sent_to, not committed at the stop), so the
    # percentiles are lower bounds and the row says so.
    uncommitted = count - lat.messages
    if uncommitted > 0:
        lat.samples.append((sent_to, stopped - sent_to, uncommitted))
    durations = sorted(p.durationMs.get("triggerExecution", 0) for p in query.recentProgress
                       if p.batchId >= timed_from_batch and p.numInputRows)
    if lat.messages != count:
        raise RuntimeError(f"latency {kind}: {lat.messages:,} paced messages measured, {count:,} sent")
    return {"query": kind, "offered_msgs_per_s": round(rate, 1), "uncommitted_at_stop": max(0, uncommitted),
            "sent_msgs_per_s": round(count / ((sent_to - sent_from) / 1000), 1), "messages": count,
            "send_seconds": round((sent_to - sent_from) / 1000, 1), **summary(lat, sent_from, sent_to),
            "batches": len(durations), "batch_ms_p50": statistics.median(durations) if durations else None,
            "batch_ms_max": durations[-1] if durations else None,
            "machine_busy_share": machine.busy_share, **cpu.per_message(count)}


def raw_read_rate(b: Bench, count: int) -> float:
    """The raw consumers' rate on a fresh backlog of ``count`` (when the read comparison did not run)."""
    queue = b.new_queue("latency-raw")
    b.preload(queue, count, groups=0)
    return read_raw(b, queue, count).rate


def latency(b: Bench, raw_rate: float, seconds: float, flavor: str) -> list[dict[str, Any]]:
    """Both queries at every share of ``raw_rate``; one row each."""
    rows = []
    for share in RATE_SHARES:
        for kind in QUERIES:
            b.say(f"  {kind} at {share:.0%} of {raw_rate:,.0f} msg/s for {seconds:.0f} s")
            row = run_one(b, kind, share * raw_rate, seconds)
            row.update(flavor=flavor, rate_share=share, raw_msgs_per_s=round(raw_rate, 1),
                       low_rate=share == min(RATE_SHARES), goal_p99_ms=GOALS_MS[kind])
            b.say(f"    p50 {row['p50_ms']} ms, p95 {row['p95_ms']} ms, p99 {row['p99_ms']} ms "
                  f"(first {row['p99_first_ms']}, last {row['p99_last_ms']}); sent "
                  f"{row['sent_msgs_per_s']:,.0f} msg/s; cores busy {row['machine_busy_share']}; "
                  f"CPU µs/msg {row.get('cpu_us_per_msg')}")
            rows.append(row)
    return rows


def markdown_section(rows: list[dict[str, Any]] | None) -> list[str]:
    """The report's lines for :func:`latency` (none when it did not run)."""
    if not rows:
        return []
    lines = ["", "## Latency: producer to committed batch, `processingTime` 1 s", "",
             "A paced producer sends at a share of the raw consumers' rate (measured in the same run) "
             "into a running query; a message's latency is its batch's commit in the sink minus its "
             "send time. *reader*: a `foreachBatch` that only fetches the send times; *queue_to_delta*: the job's "
             "Delta sink, to the Delta version that made the row visible. *First* and *last*: the "
             "p99 of the messages sent in the first and the last window; a last far above the first "
             "is a query falling behind; ≥: the query fell so far behind that it was stopped with messages "
             "not committed, counted with the least latency they can have had. Goal at the low rate: "
             "p99 within the goal, no growth. *Batches*: the duration of the batches that held "
             "timed messages, median and max. *Cores busy*: the share of the machine's cores in use "
             "from the first timed send to the last commit, by every process (brokers and producer "
             "included); near 1 the machine, not the query, set the pace. *CPU µs/msg*: the "
             "reader's process, the Spark JVM, the bench's own process, where the paced "
             "producer runs, and the three brokers together.", "",
             "| flavor | query | offered msg/s (share of raw) | sent msg/s | p50 ms | p95 ms | p99 ms "
             "| p99 first / last window (s) | goal p99 ms | batches: ms p50 / max "
             "| cores busy | CPU µs/msg: reader, JVM, producer, brokers |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        at_least = "≥ " if r.get("uncommitted_at_stop") else ""
        lines.append(
            f"| {r['flavor']} | {r['query']} | {r['offered_msgs_per_s']:,.0f} ({r['rate_share']:.0%}) | "
            f"{r['sent_msgs_per_s']:,.0f} | {at_least}{r['p50_ms']:,.0f} | {at_least}{r['p95_ms']:,.0f} | "
            f"{at_least}{r['p99_ms']:,.0f} | {r['p99_first_ms']:,.0f} / {at_least}{r['p99_last_ms']:,.0f} "
            f"({r['window_s']}) | "
            f"{r['goal_p99_ms']:,}{'' if r['low_rate'] else ' (low rate only)'} | "
            f"{r.get('batch_ms_p50') or 0:,} / {r.get('batch_ms_max') or 0:,} | "
            f"{r.get('machine_busy_share', '-')} | {_cpu_cell(r)} |")
    return lines


def _cpu_cell(row: dict[str, Any]) -> str:
    cpu = row.get("cpu_us_per_msg") or {}
    return ", ".join(str(cpu.get(k, "-")) for k in ("reader", "jvm", "driver", "brokers"))
