"""The direct append: a batch of first deliveries written in one Spark job, as Delta's own sink would.

The reader flags ``redelivered`` on every row whose ``message_id`` it already emitted in the batch,
and on a message it already received in the run (read/copies.py). So a batch after a run's first
(or a run's first, into a table with no commit yet) with no row flagged holds each message once
and nothing the table can hold: there is nothing to group and nothing to check, and grouping was
the shuffle of whole rows that held the checked path near 0.8x of Delta's own sink
(docs/design.md, "Pipelines: exactly once into Delta").

The batch is appended as it comes, a later batch without a transaction id. Its counts come from
``DataFrame.observe`` in the same job, and a filter stops the job with ``raise_error`` at the first
flagged row, before Delta commits anything; the sink then takes the checked path for that batch.
"""

from __future__ import annotations

import time
from typing import Literal, NamedTuple

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from clustermq.pipelines.body_parse import BodyParse
from clustermq.pipelines.table_columns import stamped

#: The error the guard raises; found in the failed job's message to tell it from other failures.
GUARD = "clustermq: a row flagged redelivered sends this batch to the checked path"
#: How long to wait for the observed counts once the save returned: they were there within 2 ms
#: in 8 of 8 measured saves. None at all means Delta skipped the append (its log already had the
#: batch); the sink then decides the batch again on the table (the strict path).
OBSERVED_WAIT_S = 5.0


#: Why a batch takes the checked path after all: a row was flagged (nothing committed), the save
#: returned without its counts (Delta may have skipped it: decided again on the table, strictly),
#: or another writer committed first (the checked path retries).
Fallback = Literal["flagged", "unobserved", "conflict"]


class DirectCounts(NamedTuple):
    rows: int  #: rows appended
    corrupt: int | None  #: unparsable bodies among them (None without body parsing)


def append_direct(
    batch: DataFrame, batch_id: int, columns: tuple[str, ...], path: str, app_id: str | None,
    parse: BodyParse | None,
) -> DirectCounts | Fallback:
    """Append ``batch`` whole; its counts, or why it must take the checked path instead
    (``"flagged"`` or ``"unobserved"``: :data:`Fallback`).

    With ``app_id`` the append carries ``txnAppId``/``txnVersion``; without, it is a blind
    append: Delta then looks up no transaction, and that lookup rebuilds the table's state in
    three Spark jobs per commit, about two thirds of a second per batch on 2 cores
    (docs/design.md, "Pipelines: exactly once into Delta")."""
    rows = stamped(batch, batch_id)
    if parse is not None:
        rows = parse.apply(rows)
    rows = rows.where(F.when(F.col("redelivered"), F.raise_error(F.lit(GUARD))).otherwise(F.lit(True)))
    observation = Observation(f"clustermq-direct-{app_id or 'blind'}-{batch_id}-{time.monotonic_ns()}")
    counted = [F.count(F.lit(1)).alias("rows")]
    if parse is not None:
        counted.append(F.count(F.col(parse.corrupt_column)).alias("corrupt"))
    observed = rows.observe(observation, *counted)
    writer = observed.select(*columns).write.format("delta").mode("append")
    if app_id is not None:
        writer = writer.option("txnAppId", app_id).option("txnVersion", batch_id)
    try:
        writer.save(path)
    except Exception as exc:
        if GUARD in str(exc):
            return "flagged"
        raise
    if not _observed(observation):
        return "unobserved"
    metrics = observation.get
    return DirectCounts(rows=int(metrics["rows"]),
                        corrupt=int(metrics["corrupt"]) if parse is not None else None)


def _observed(observation: Observation) -> bool:
    """Whether the observed counts arrived within ``OBSERVED_WAIT_S`` (``Observation.get`` itself
    waits for ever when the plan never ran). Only a classic session's JVM observation can be
    asked without waiting; any other is taken as observed."""
    java = getattr(observation, "_jo", None)
    if java is None:
        return True
    future = java.future()
    deadline = time.monotonic() + OBSERVED_WAIT_S
    while not future.isCompleted():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True
