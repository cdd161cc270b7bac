"""The queue → Delta pipeline assembled: the clustermq reader, the idempotent Delta sink, the
trigger, the checkpoint.

The ``queue_to_delta`` job (:mod:`clustermq.jobs.queue_to_delta`) and the demo both start it
through :func:`start_queue_to_delta`, so the demo and the tests run exactly what the job runs.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from clustermq.errors import JobConfigError
from clustermq.pipelines.body_parse import BodyParse
from clustermq.pipelines.delta_sink import BatchReport, IdempotentDeltaWriter
from clustermq.pipelines.park import Parking
from clustermq.pipelines.streaming import apply_trigger


def start_queue_to_delta(
    spark: SparkSession,
    reader_options: dict[str, str],
    table: str,
    checkpoint: str,
    trigger: str,
    dedupe: str = "redelivered",
    on_report: Callable[[BatchReport], None] | None = None,
    after_commit: Callable[[int], None] | None = None,
    id_header: str | None = None,
    parse: BodyParse | None = None,
    park: Parking | None = None,
) -> tuple[StreamingQuery, IdempotentDeltaWriter]:
    """Start the queue → Delta streaming query.

    Returns the running query and its sink (whose ``totals`` count what was written). A bad
    ``parse`` schema is a ``JobConfigError`` naming ``--schema``, raised before the query
    starts (nothing is consumed).
    """
    if parse is not None:
        try:
            parse.fields()
        except ValueError as exc:
            raise JobConfigError(f"--schema: {exc}") from None
    sink = IdempotentDeltaWriter(table, dedupe, on_report=on_report, after_commit=after_commit,
                                 id_header=id_header, parse=parse, park=park)
    stream = spark.readStream.format("clustermq").options(**reader_options).load()
    writer = stream.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    query = apply_trigger(writer, trigger).start()
    # The query id is kept in the checkpoint: the same txnAppId after every restart.
    sink.set_app_id(f"clustermq-queue-to-delta-{query.id}")
    return query, sink
