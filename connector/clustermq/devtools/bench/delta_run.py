"""Scenario (c) of the read comparison: what the ``queue_to_delta`` job
(``clustermq.jobs.queue_to_delta``) does, in process.

The job's own ``main`` builds and stops its session; the benchmark needs the session it already
has (and its JVM for the memory probe), so it assembles the same pieces: the reader, the job's
idempotent Delta ``foreachBatch`` writer, Trigger.AvailableNow.
"""

from __future__ import annotations

import time
import uuid

from clustermq.devtools.bench.probes import DepthSampler
from clustermq.devtools.bench.scenarios import Bench, Figure, depth_rise, first_batch, progress_stats
from clustermq.pipelines.delta_sink import IdempotentDeltaWriter


def read_into_delta(b: Bench, queue: str, count: int, max_per_trigger: int) -> Figure:
    """Drain ``count`` preloaded messages into a fresh Delta table; fails unless all arrived."""
    table = b.work / f"delta-{uuid.uuid4().hex[:8]}"
    checkpoint = b.work / f"cp-delta-{uuid.uuid4().hex[:8]}"
    sink = IdempotentDeltaWriter(str(table))
    options = b.reader_options(queue, maxMessagesPerTrigger=max_per_trigger)
    with DepthSampler(b.connection(queue), queue) as depths, b.cpu() as cpu:
        started, started_epoch = time.monotonic(), time.time()
        query = (b.spark.readStream.format("clustermq").options(**options).load()
                 .writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        sink.set_app_id(f"clustermq-bench-{query.id}")
        query.awaitTermination()
        seconds = time.monotonic() - started
    rows = b.spark.read.format("delta").load(str(table)).count()
    if rows != count:
        raise RuntimeError(f"queue_to_delta: {rows} rows in the table, {count} produced")
    return Figure("read: queue_to_delta -> Delta table", rows, seconds,
                  {"maxMessagesPerTrigger": max_per_trigger, "depth_series": depths.series.samples,
                   **progress_stats(query), **first_batch(query, started_epoch),
                   **depth_rise(depths.series.samples), **cpu.per_message(rows)})
