"""The benchmark's scenarios: each one does one kind of work and returns its figures.

Every connector figure has a raw-client twin doing the same work on the same cluster in the same
process (``raw.raw_drain`` for reading, the load generator for writing), so the report can quote
ratios that survive a noisy machine.
"""

from __future__ import annotations

import datetime
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.listener import StreamingQueryProgress

from clustermq.broker.connection_options import ConnectionOptions
from clustermq.broker.nodes import Node, format_nodes
from clustermq.devtools.bench.probes import CpuMeter, DepthSampler, MemorySampler
from clustermq.devtools.bench.raw import raw_drain
from clustermq.devtools.loadgen import LoadSpec, produce
from clustermq.options import parse_connection_options

Say = Callable[[str], None]

#: A Classic network of brokers with many message groups sometimes stops dispatching to a
#: node's consumer although it has prefetch room and the node has messages (docs/broker-behaviour.md,
#: "Dispatch stalls with many groups"; their length: docs/decisions.md, "The benchmark's
#: baselines"). A run that sees no arrival for this long is reported as stalled, not waited out.
STALL_S = 20.0


@dataclass
class Figure:
    """One measured run: what ran, how many messages, how long, plus extras."""

    name: str
    messages: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "messages": self.messages, "seconds": round(self.seconds, 3),
                "messages_per_s": round(self.rate, 1), **self.extra}


@dataclass
class Bench:
    """What every scenario needs: the cluster's nodes and login, a Spark session, a work dir."""

    nodes: list[Node]
    username: str
    password: str
    spark: SparkSession
    work: Path
    say: Say
    body_size: int = 256
    groups: int = 1000
    #: the Spark JVM's pid: CPU meters look for the reader process and the workers under it
    jvm_pid: int | None = None
    #: the brokers' processes (the local cluster's), metered beside the connector's
    broker_pids: tuple[int, ...] = ()

    def cpu(self) -> CpuMeter:
        return CpuMeter(self.jvm_pid, broker_pids=self.broker_pids)

    def connection(self, queue: str, nodes: list[Node] | None = None) -> ConnectionOptions:
        return parse_connection_options(self.reader_options(queue, nodes))

    def reader_options(self, queue: str, nodes: list[Node] | None = None, **extra: Any) -> dict[str, str]:
        raw = {"brokers": format_nodes(nodes or self.nodes), "queue": queue,
               "username": self.username, "password": self.password}
        raw.update({k: str(v) for k, v in extra.items()})
        return raw

    def new_queue(self, what: str) -> str:
        return f"bench.{what}.{uuid.uuid4().hex[:8]}"

    def preload(self, queue: str, count: int, nodes: list[Node] | None = None,
                groups: int | None = None) -> float:
        """Persistent backlog of ``count`` messages, groups (``self.groups`` unless given; 0:
        none) hashed over the nodes; seconds."""
        self.say(f"  preloading {count:,} messages into {queue}")
        started = time.monotonic()
        produce(self.connection(queue, nodes),
                LoadSpec(count=count, groups=self.groups if groups is None else groups,
                         size=self.body_size, persistent=True))
        return time.monotonic() - started


# ------------------------------------------------------------------------------- writing
def write_raw(b: Bench, count: int) -> tuple[Figure, str]:
    """Plain stomp.py producers, one per node, persistent, a transaction per 1,000 + receipt."""
    queue = b.new_queue("write-raw")
    with b.cpu() as cpu:
        seconds = b.preload(queue, count)
    return Figure("write: raw stomp.py producers", count, seconds, cpu.per_message(count)), queue


def write_connector(b: Bench, count: int, partitions: int = 6, write_mode: str = "atomic") -> tuple[Figure, str]:
    """The clustermq writer, same rows (256-byte bodies, 1,000 groups), from a cached DataFrame."""
    queue = b.new_queue(f"write-cmq-{write_mode}")
    pad = "x" * max(0, b.body_size - 24)
    df = (b.spark.range(0, count, 1, partitions)
          .select(F.concat(F.lit('{"order":'), F.col("id").cast("string"), F.lit(f',"pad":"{pad}"}}'))
                  .alias("body"),
                  F.concat(F.lit("g"), (F.col("id") % b.groups).cast("string")).alias("group_id"))
          .cache())
    df.count()  # materialise the input so the timing is the write alone
    with b.cpu() as cpu:
        started = time.monotonic()
        (df.write.format("clustermq").mode("append").options(**b.reader_options(queue))
         .option("writeMode", write_mode).save())
        seconds = time.monotonic() - started
    df.unpersist()
    name = "write: clustermq writer" + ("" if write_mode == "atomic" else f" ({write_mode})")
    return Figure(name, count, seconds,
                  {"partitions": partitions, **cpu.per_message(count)}), queue


# ------------------------------------------------------------------------------- reading
#: Per-node prefetch of the raw consumers: the reader's default in the read comparison
#: (2 x maxMessagesPerTrigger 20,000): a smaller window stalled the raw consumers where the
#: reader drained, so the baseline timed the window, not the brokers (docs/decisions.md,
#: "The benchmark's baselines").
RAW_PREFETCH = 40_000
#: the raw read's row name: the baseline of every read ratio and of the latency step's rates
RAW_READ = "read: raw stomp.py consumers"


def read_raw(b: Bench, queue: str, count: int) -> Figure:
    with DepthSampler(b.connection(queue), queue) as depths, b.cpu() as cpu:
        result = raw_drain(b.connection(queue), count, prefetch=RAW_PREFETCH,
                           idle_timeout_s=STALL_S)
    extra: dict[str, Any] = {"per_node": result.per_node, "depth_series": depths.series.samples,
                             **depth_rise(depths.series.samples), **cpu.per_message(result.total)}
    if result.total < count:
        extra["stalled_with_left"] = count - result.total
        b.say(f"  raw consumers stalled with {count - result.total} messages left; "
              "fresh consumers take the rest (not timed)")
        drain_quietly(b, queue, count - result.total)
    return Figure(RAW_READ, result.total, result.seconds, extra)


def progress_stats(query: StreamingQuery) -> dict[str, Any]:
    """Batches that read something, their p50/p95 duration (ms) and the largest batch."""
    durations, rows = [], []
    for p in query.recentProgress:
        if p.numInputRows:
            durations.append(p.durationMs.get("triggerExecution", 0))
            rows.append(p.numInputRows)
    if not durations:
        return {"batches": 0}
    ordered = sorted(durations)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {"batches": len(durations), "batch_ms_p50": statistics.median(durations),
            "batch_ms_p95": p95, "max_batch_rows": max(rows), **after_first_batch(query)}


def after_first_batch(query: StreamingQuery) -> dict[str, Any]:
    """Messages per second from the end of the first batch that read something to the end of
    the last: the rate once the query runs, without its start (Python runner, connections,
    the first plan), which a raw client does not pay and which a long-running query pays once."""
    busy = [p for p in query.recentProgress if p.numInputRows]
    if len(busy) < 2:
        return {}
    span = end_seconds(busy[-1]) - end_seconds(busy[0])
    rows = sum(p.numInputRows for p in busy[1:])
    return {"after_first_batch_msgs_per_s": round(rows / span, 1)} if span > 0 else {}


def read_connector(
    b: Bench, queue: str, count: int, max_per_trigger: int, nodes: list[Node] | None = None,
    name: str = "read: clustermq reader -> noop", memory_jvm_pid: int | None = None,
    reader_extra: dict[str, str] | None = None,
) -> Figure:
    """The streaming reader, Trigger.AvailableNow, into Spark's ``noop`` sink (``reader_extra``:
    more reader options)."""
    # availableNowIdleTimeout = STALL_S: a stalled node ends the run (reported), see STALL_S.
    options = b.reader_options(queue, nodes, maxMessagesPerTrigger=max_per_trigger,
                               availableNowIdleTimeout=int(STALL_S * 1000), **(reader_extra or {}))
    checkpoint = b.work / f"cp-{uuid.uuid4().hex[:8]}"
    memory = MemorySampler(memory_jvm_pid) if memory_jvm_pid else None
    with DepthSampler(b.connection(queue, nodes), queue) as depths, b.cpu() as cpu:
        if memory:
            memory.__enter__()
        try:
            started, started_epoch = time.monotonic(), time.time()
            query = (b.spark.readStream.format("clustermq").options(**options).load()
                     .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            seconds = time.monotonic() - started
        finally:
            if memory:
                memory.__exit__()
    read = sum(p.numInputRows for p in query.recentProgress)
    stall: dict[str, Any] = {}
    if read < count:
        # time to the end of the last batch that read something, not the idle wait after it
        busy = [p for p in query.recentProgress if p.numInputRows]
        if busy:
            last_end = end_seconds(busy[-1]) - end_seconds(query.recentProgress[0]) \
                + query.recentProgress[0].durationMs.get("triggerExecution", 0) / 1000.0
            seconds = min(seconds, max(last_end, 0.001))
        stall["stalled_with_left"] = count - read
        b.say(f"  {name}: stalled with {count - read} messages left; fresh consumers take the "
              "rest (not timed)")
        drain_quietly(b, queue, count - read, nodes)
    extra: dict[str, Any] = {**stall, "maxMessagesPerTrigger": max_per_trigger, "nodes": len(nodes or b.nodes),
                             "depth_series": depths.series.samples, **progress_stats(query),
                             **first_batch(query, started_epoch), **depth_rise(depths.series.samples),
                             **cpu.per_message(read)}
    if memory:
        jvm, reader = memory.peak()
        extra["memory_series"] = memory.samples
        extra["peak_rss_jvm_mib"] = round(jvm / 1024, 1)
        extra["peak_rss_reader_mib"] = round(reader / 1024, 1)
        extra.update(_memory_growth(memory.samples))
    return Figure(name, read, seconds, extra)


def first_batch(query: StreamingQuery, started_epoch: float) -> dict[str, Any]:
    """Seconds from the query's start to the end of its first batch that read something: what a
    user waits for on a cold backlog (the broker's dispatch, not Spark's start, dominates it)."""
    busy = [p for p in query.recentProgress if p.numInputRows]
    return {"first_batch_s": round(end_seconds(busy[0]) - started_epoch, 1)} if busy else {}


def depth_rise(samples: list[tuple[float, dict[str, int | None]]]) -> dict[str, Any]:
    """Messages each node's depth *gained* while the reader drained it (sum of the rises between
    samples): 0 when every node's backlog only falls, more when the network shipped messages
    from one node whose reader had them to another."""
    rises: dict[str, int] = {}
    last: dict[str, int] = {}
    for _, depths in samples:
        for node, depth in depths.items():
            if depth is None:
                continue
            if node in last:
                rises[node] = rises.get(node, 0) + max(0, depth - last[node])
            else:
                rises.setdefault(node, 0)
            last[node] = depth
    return {"depth_rise": rises, "depth_rise_max": max(rises.values(), default=0)}


def _memory_growth(samples: list[tuple[float, int, int]]) -> dict[str, Any]:
    """Peak RSS in the first and the last fifth of the drain: flat means no growth."""
    active = [s for s in samples if s[2] > 0]
    if len(active) < 10:
        return {}
    fifth = max(1, len(active) // 5)
    early, late = active[:fifth], active[-fifth:]
    return {
        "reader_rss_mib_first_fifth": round(max(s[2] for s in early) / 1024, 1),
        "reader_rss_mib_last_fifth": round(max(s[2] for s in late) / 1024, 1),
        "jvm_rss_mib_first_fifth": round(max(s[1] for s in early) / 1024, 1),
        "jvm_rss_mib_last_fifth": round(max(s[1] for s in late) / 1024, 1),
    }


def end_seconds(progress: StreamingQueryProgress) -> float:
    """Epoch seconds at which a progress entry's trigger ended."""
    started = datetime.datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).timestamp()
    return started + progress.durationMs.get("triggerExecution", 0) / 1000.0


def drain_quietly(b: Bench, queue: str, count: int, nodes: list[Node] | None = None) -> None:
    """Empty a queue the fast way after a scenario that left messages behind (not timed)."""
    result = raw_drain(b.connection(queue, nodes), count, prefetch=RAW_PREFETCH,
                       idle_timeout_s=STALL_S)
    if result.total != count:
        b.say(f"  warning: cleanup drained {result.total} of {count} from {queue}")
