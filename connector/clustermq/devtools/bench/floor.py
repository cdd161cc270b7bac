"""The floor scenario: the reader's rows from a source with no broker (bench/floor_source.py),
into ``noop``, the queue_to_delta job's Delta sink, or Delta's own streaming sink, timed as the
reader's runs are. Delta's own sink is idempotent per batch but does not de-duplicate by
``message_id``: beside the job's sink it shows what that de-duplication costs."""

from __future__ import annotations

import time
import uuid
from typing import Literal

from clustermq.devtools.bench.floor_source import FORMAT, FloorDataSource
from clustermq.devtools.bench.report import FLOOR_PREFIX
from clustermq.devtools.bench.scenarios import Bench, Figure, first_batch, progress_stats
from clustermq.pipelines.delta_sink import IdempotentDeltaWriter

#: where the floor's rows go: ``noop``, the job's sink (``job``), Delta's own (``delta``)
FloorSink = Literal["noop", "job", "delta"]
_SINK_NAMES = {"noop": "noop", "job": "the job's Delta sink", "delta": "Delta's own sink"}


def read_floor(b: Bench, count: int, max_per_trigger: int, into: FloorSink) -> Figure:
    """``count`` rows from the floor source, Trigger.AvailableNow, into ``into`` (a fresh
    table for the Delta sinks); fails unless every row arrived."""
    b.spark.dataSource.register(FloorDataSource)
    checkpoint = b.work / f"cp-floor-{uuid.uuid4().hex[:8]}"
    table = b.work / f"delta-floor-{uuid.uuid4().hex[:8]}"
    sink = IdempotentDeltaWriter(str(table)) if into == "job" else None
    options = {"messages": count, "maxMessagesPerTrigger": max_per_trigger, "groups": b.groups,
               "bodySize": b.body_size}
    with b.cpu() as cpu:
        started, started_epoch = time.monotonic(), time.time()
        writer = b.spark.readStream.format(FORMAT).options(**options).load().writeStream
        writer = writer.foreachBatch(sink) if sink else writer.format(into)  # "noop" or "delta"
        query = (writer.option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start(str(table) if into == "delta" else None))
        if sink:
            sink.set_app_id(f"clustermq-bench-{query.id}")
        query.awaitTermination()
        seconds = time.monotonic() - started
    rows = (b.spark.read.format("delta").load(str(table)).count() if into != "noop"
            else sum(p.numInputRows for p in query.recentProgress))
    if rows != count:
        raise RuntimeError(f"floor source: {rows} rows arrived, {count} served")
    batches = sum(1 for p in query.recentProgress if p.numInputRows)
    if batches != -(-count // max_per_trigger):  # the reader's batch limit, or no floor for it
        raise RuntimeError(f"floor source: {count} rows in {batches} batches of at most "
                           f"{max_per_trigger}")
    return Figure(f"{FLOOR_PREFIX} -> {_SINK_NAMES[into]}", rows, seconds,
                  {"maxMessagesPerTrigger": max_per_trigger, **progress_stats(query),
                   **first_batch(query, started_epoch), **cpu.per_message(rows)})
