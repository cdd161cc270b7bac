"""The bench's steps that are not raw-client comparisons: the reader over 1, 2 and 3 nodes, the
batch-size sweep and memory while draining a large backlog. One run each, on the first flavor:
they show a shape (scaling, a curve, flat memory), not a ratio to hold against the raw client."""

from __future__ import annotations

from typing import Any

from clustermq.devtools.bench import report
from clustermq.devtools.bench.comparisons import READ_MAX_PER_TRIGGER
from clustermq.devtools.bench.scenarios import Bench, Figure, read_connector

SWEEP = (1_000, 5_000, 20_000, 50_000)
MEMORY_MAX_PER_TRIGGER = 10_000


def slim(fig: Figure, keep_memory: bool = False) -> dict[str, Any]:
    """A figure's JSON without its sampled series (kept only where a plot needs them)."""
    row = fig.as_json()
    row.pop("depth_series", None)
    if not keep_memory:
        row.pop("memory_series", None)
    return row


def scaling(b: Bench, count: int, results: dict[str, Any]) -> None:
    for k in (1, 2, 3):
        queue = b.new_queue(f"scale{k}")
        b.preload(queue, count, b.nodes[:k])
        fig = read_connector(b, queue, count, READ_MAX_PER_TRIGGER, b.nodes[:k],
                             name=f"read: {k} node(s)")
        results["scaling"].append({**slim(fig), "nodes": k})
        b.say(f"  {k} node(s): {fig.rate:,.0f} msg/s")
    one = results["scaling"][0]["messages_per_s"]
    for row in results["scaling"]:
        row["ratio_to_one_node"] = report.ratio(row["messages_per_s"], one)


def sweep(b: Bench, count: int, results: dict[str, Any]) -> None:
    for size in SWEEP:
        queue = b.new_queue(f"sweep{size}")
        b.preload(queue, count)
        fig = read_connector(b, queue, count, size, name=f"maxMessagesPerTrigger={size}")
        results["batch_size"].append(slim(fig))
        b.say(f"  maxMessagesPerTrigger={size}: {fig.rate:,.0f} msg/s, "
              f"p50 {fig.extra.get('batch_ms_p50')} ms, p95 {fig.extra.get('batch_ms_p95')} ms")


def memory(b: Bench, count: int, results: dict[str, Any]) -> None:
    queue = b.new_queue("memory")
    b.preload(queue, count)
    fig = read_connector(b, queue, count, MEMORY_MAX_PER_TRIGGER, name="memory drain",
                         memory_jvm_pid=b.jvm_pid)
    results["memory"] = slim(fig, keep_memory=True)
    b.say(f"  drained {count:,}: peak RSS reader {fig.extra.get('peak_rss_reader_mib')} MiB, "
          f"JVM {fig.extra.get('peak_rss_jvm_mib')} MiB")
