"""The bench's ``scaleout`` step: one and two ``queue_to_delta`` queries on one queue, into one
Delta table, alternated for each round: the aggregate rate of two queries against one.

One query reads in one Python process (the streaming source's runner, about 38 µs of CPU per
message in ``make bench``), which caps it whatever the cluster could deliver; a second query is
a second competing consumer with its own runner. Both queries run in the bench's Spark session:
a second driver would add a second JVM, which measures the machine's cores more than the
connector, and each query's reader process and checkpoint are its own either way. Each round
checks what the README promises: every message in the table exactly once, and every query wrote.

The backlog has no message groups. A group stays with the consumer that took it first, so with
the bench's 1,000 groups the query that subscribed first on Artemis took all 60,000 messages and
the second none (the second query starts a few seconds later); on Classic they split about
evenly. Ungrouped messages measure what a second competing consumer adds.

Two rates per run. The whole run: the messages over the time from the start to the end of the
last batch that read something (not the few seconds an AvailableNow query waits to see the
queue stay empty once the other query took the rest). After the first batch: the rows of the
batches that ended after every query's first batch, over that span: the rate once all queries
run, without their start, as for the other read rows.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from clustermq.devtools.bench.probes import MachineLoad
from clustermq.devtools.bench.scenarios import Bench, end_seconds
from clustermq.devtools.bench.spread import median_item, named_range
from clustermq.pipelines.delta_sink import IdempotentDeltaWriter

QUERIES = (1, 2)
#: the job's default batch limit (``queue_to_delta --max-messages-per-trigger``)
MAX_PER_TRIGGER = 10_000
#: the untimed first run (two queries, two batches each at most): the session's first Delta table,
#: its readers' first plans and the JIT are cold; 1,000 left the next three rounds at 1,970, 2,814
#: and 3,698 msg/s (one query, 60,000 messages)
WARM_UP_MESSAGES = 20_000


def run_queries(b: Bench, queue: str, count: int, queries: int, max_per_trigger: int,
                every_query_writes: bool = True) -> dict[str, Any]:
    """Drain ``count`` preloaded messages with ``queries`` queries into one fresh table.

    ``every_query_writes`` is off for the warm-up only: the queries start one after the other,
    and on a slow machine the first drained the warm-up's smaller backlog before the second
    subscribed (Artemis: 20,000 and 0); what the warm-up warms does not depend on the split.
    """
    table = b.work / f"scaleout-{uuid.uuid4().hex[:8]}"
    options = b.reader_options(queue, maxMessagesPerTrigger=max_per_trigger)
    sinks = [IdempotentDeltaWriter(str(table)) for _ in range(queries)]
    started_epoch = time.time()
    running: list[StreamingQuery] = []
    with MachineLoad() as machine, b.cpu() as cpu:
        try:
            for sink in sinks:
                query = (b.spark.readStream.format("clustermq").options(**options).load()
                         .writeStream.foreachBatch(sink)
                         .option("checkpointLocation", str(b.work / f"cp-scaleout-{uuid.uuid4().hex[:8]}"))
                         .trigger(availableNow=True).start())
                sink.set_app_id(f"clustermq-bench-{query.id}")
                running.append(query)
            for query in running:
                query.awaitTermination()
        finally:
            for query in running:
                query.stop()
    rows = b.spark.read.format("delta").load(str(table)).agg(
        F.count("*").alias("rows"), F.countDistinct("message_id").alias("ids")).first()
    assert rows is not None
    per_query = [sink.totals.written for sink in sinks]
    if rows["rows"] != count or rows["ids"] != count:
        raise RuntimeError(f"scaleout with {queries} queries: {rows['rows']} rows and {rows['ids']} "
                           f"distinct ids in the table, {count} produced")
    if every_query_writes and 0 in per_query:
        raise RuntimeError(f"scaleout with {queries} queries: rows written per query {per_query}; "
                           "a query that wrote nothing measured one consumer, not two")
    busy = [[p for p in q.recentProgress if p.numInputRows] for q in running]
    end = max(end_seconds(ps[-1]) for ps in busy)
    steady_from = max(end_seconds(ps[0]) for ps in busy)
    steady_rows = sum(p.numInputRows for ps in busy for p in ps if end_seconds(p) > steady_from)
    span = end - steady_from
    return {"queries": queries, "messages": count, "seconds": round(end - started_epoch, 3),
            "messages_per_s": round(count / (end - started_epoch), 1),
            "after_first_batch_msgs_per_s": round(steady_rows / span, 1) if span > 0 else None,
            "rows_per_query": per_query, "machine_busy_share": machine.busy_share,
            **cpu.per_message(count)}


def scaleout(b: Bench, count: int, rounds: int, flavor: str,
             max_per_trigger: int = MAX_PER_TRIGGER) -> list[dict[str, Any]]:
    """``rounds`` × (one query, two queries), alternating which goes first, after an untimed
    two-query warm-up; one row per query count with the median run's figures, and on the
    two-query row the ratio's median and range."""
    warm_up = b.new_queue("scaleout-warmup")
    warm = min(count, WARM_UP_MESSAGES)
    b.preload(warm_up, warm, groups=0)
    run_queries(b, warm_up, warm, max(QUERIES), max_per_trigger, every_query_writes=False)
    runs: dict[int, list[dict[str, Any]]] = {k: [] for k in QUERIES}
    ratios: list[float] = []
    steady_ratios: list[float] = []
    for i in range(rounds):
        order = QUERIES if i % 2 == 0 else tuple(reversed(QUERIES))
        for k in order:
            queue = b.new_queue(f"scaleout{k}")
            b.preload(queue, count, groups=0)
            run = run_queries(b, queue, count, k, max_per_trigger)
            runs[k].append(run)
            b.say(f"  round {i + 1}: {k} quer{'y' if k == 1 else 'ies'} {run['messages_per_s']:,.0f} msg/s, "
                  f"after the first batch {run['after_first_batch_msgs_per_s'] or 0:,.0f}, "
                  f"rows per query {run['rows_per_query']}, machine busy {run['machine_busy_share']}")
        one, two = runs[1][-1], runs[2][-1]
        ratios.append(two["messages_per_s"] / one["messages_per_s"])
        if one["after_first_batch_msgs_per_s"] and two["after_first_batch_msgs_per_s"]:
            steady_ratios.append(two["after_first_batch_msgs_per_s"] / one["after_first_batch_msgs_per_s"])
    rows = []
    for k in QUERIES:
        rates = [r["messages_per_s"] for r in runs[k]]
        row = {**median_item(runs[k], key=lambda r: r["messages_per_s"]), "flavor": flavor,
               "rounds": rounds, "messages_per_s_min": min(rates), "messages_per_s_max": max(rates)}
        if k == 2:
            row.update(named_range("ratio_to_one_query", ratios),
                       **named_range("after_first_batch_ratio", steady_ratios))
        rows.append(row)
    return rows


def markdown_section(rows: list[dict[str, Any]] | None) -> list[str]:
    """The report's lines for :func:`scaleout` (none when it did not run)."""
    if not rows:
        return []
    lines = ["", "## Scaling past one driver: queue_to_delta queries on one queue into one table", "",
             "Each round drains the same backlog with one query and with two (alternating which goes "
             "first), both into one fresh Delta table, and checks every message is in it exactly once "
             "and every query wrote. Rates: median run (range over the rounds); the ratio is the median "
             "of the per-round ratios.", "",
             "*Cores busy*: the share of the machine's cores in use during the run, by every process "
             "(brokers included); near 1 the machine, not the queries, set the pace. *CPU µs per "
             "message*: the queries' reader processes together, and the Spark JVM.", "",
             "| flavor | queries | messages | messages/s | after the first batch | rows per query (median run) "
             "| ratio to one query | after the first batch | cores busy | CPU µs/msg: readers, JVM |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for row in rows:
        ratio = (f"{row['ratio_to_one_query']} ({row['ratio_to_one_query_min']}-{row['ratio_to_one_query_max']})"
                 if "ratio_to_one_query" in row else "1")
        steady = (f"{row['after_first_batch_ratio']} ({row['after_first_batch_ratio_min']}-"
                  f"{row['after_first_batch_ratio_max']})" if "after_first_batch_ratio" in row else
                  ("1" if row["queries"] == 1 else "-"))
        cpu = row.get("cpu_us_per_msg") or {}
        lines.append(
            f"| {row['flavor']} | {row['queries']} | {row['messages']:,} | {row['messages_per_s']:,.0f} "
            f"({row['messages_per_s_min']:,.0f}-{row['messages_per_s_max']:,.0f}) | "
            f"{row['after_first_batch_msgs_per_s'] or 0:,.0f} | "
            f"{', '.join(f'{n:,}' for n in row['rows_per_query'])} | {ratio} | {steady} | "
            f"{row.get('machine_busy_share')} | {cpu.get('reader', '-')}, {cpu.get('jvm', '-')} |")
    return lines
