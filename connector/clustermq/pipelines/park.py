"""Parking: the rows a Delta table would refuse go to a queue instead of failing every batch.

A row that breaks one of the table's CHECK constraints, or leaves one of its NOT NULL columns
empty, makes Delta refuse the whole append. The batch fails, its messages go back to the
brokers unacknowledged, and the next run fails on the same message: a poison message stops the
pipeline for good, and the brokers never give up on it (Classic over STOMP has no limit;
Artemis counts only the first message a failing query held, docs/broker-behaviour.md,
"Delivery attempts and the dead-letter address"). With a park queue (``--park-queue``) the sink
evaluates the table's rules on the batch first and publishes the rows that break one to that
queue, on the same cluster, through the clustermq writer; the rest of the batch is appended as
usual. With ``--parse`` a body that does not parse is parked too, instead of being kept in
``_corrupt``.

A parked message keeps its body, group and priority and the headers its producer set, and gets
``park_reason`` (the rule it broke), ``park_origin`` (the queue it came from) and
``park_message_id`` (its ``message_id`` there). The park publish (staged, atomic) precedes the
Delta append, which precedes the acknowledgement: a message is on the park queue before its
original is acknowledged. A batch replayed after a crash between the publish and Spark's commit
parks its rows again, so the park queue is at least once (``park_message_id`` tells copies
apart) while the table stays exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from clustermq.broker.queue_names import queue_matches
from clustermq.errors import JobConfigError
from clustermq.options import WriteOptions
from clustermq.options.table import QUEUE, TOPIC, check_known, known_options
from clustermq.write.headers import CLUSTERMQ_PREFIX
from clustermq.write.layout import RESERVED_HEADERS

#: the headers a parked message gets
REASON_HEADER, ORIGIN_HEADER, MESSAGE_ID_HEADER = "park_reason", "park_origin", "park_message_id"
#: prefixes of headers the brokers set (JMS-defined properties, Artemis's own), which a parked
#: message does not carry over; with the writer's reserved names, the group header, ``expires``
#: (a parked message must not expire with its original's deadline) and an earlier parking's own
_BROKER_PREFIXES = ("jmsx", "_amq", "__amq", "park_", CLUSTERMQ_PREFIX)
_NOT_CARRIED = frozenset({*RESERVED_HEADERS, "expires", "content-type"})
_CONSTRAINT_PROPERTY = "delta.constraints."


@dataclass(frozen=True)
class Parking:
    """Where refused rows go: ``queue`` on the cluster the job reads, with the job's login."""

    queue: str
    #: the clustermq writer's options (brokers, login, TLS, ...): never shown, they hold the password
    writer_options: Mapping[str, str] = field(repr=False)
    #: the header that carries a group (``groupIdHeader``): the writer sets it from ``group_id``
    group_header: str = "clustermq_group"

    @classmethod
    def for_job(cls, queue: str, reader_options: Mapping[str, str]) -> Parking:
        """The job's reader options narrowed to the writer's, publishing to ``queue``; a queue
        name the writer refuses, or the queue read, is a ``JobConfigError`` naming the flag."""
        writable = {name.lower() for name in known_options("write")} - {TOPIC.name.lower()}
        options = {k: v for k, v in reader_options.items() if k.lower() in writable}
        known = check_known(reader_options, "read")
        read = [] if TOPIC.given(known) else [s for s in QUEUE.read(known) if queue_matches(s, queue.strip())]
        if read:
            raise JobConfigError(f"--park-queue: '{queue}' is read by the job (queue '{read[0]}'); "
                                 "park in a queue the job does not read")
        options["queue"] = queue
        try:
            parsed = WriteOptions.parse(options)
        except ValueError as exc:
            raise JobConfigError(f"--park-queue: {exc}") from None
        return cls(queue, options, parsed.connection.group_id_header)

    def reason(self, spark: SparkSession, path: str, table_exists: bool, columns: Sequence[str],
               corrupt_column: str | None) -> Column | None:
        """Why the table would refuse a row (a string), null where it would take it; ``None``
        when nothing can be refused. Read from the table on every batch: a constraint added
        while the query runs applies from the next batch."""
        reasons: list[Column] = []  # the first that applies is the reason given
        if corrupt_column is not None:  # a body that does not parse breaks the rest too
            reasons.append(F.when(F.col(corrupt_column).isNotNull(),
                                  F.lit("the body does not parse")))
        if table_exists:
            quoted = path.replace("`", "``")
            properties = spark.sql(f"DESCRIBE DETAIL delta.`{quoted}`").first()
            assert properties is not None
            for key, rule in sorted((properties["properties"] or {}).items()):
                if key.startswith(_CONSTRAINT_PROPERTY):
                    name = key[len(_CONSTRAINT_PROPERTY):]
                    # Delta refuses a row whose CHECK is false or null
                    broken = ~F.coalesce(F.expr(rule), F.lit(False))
                    reasons.append(F.when(broken, F.lit(f"CHECK constraint {name}: {rule}")))
            for column in spark.read.format("delta").load(path).schema.fields:
                if not column.nullable and column.name in columns:
                    reasons.append(F.when(F.col(f"`{column.name}`").isNull(),
                                          F.lit(f"NOT NULL column {column.name} is null")))
        return F.coalesce(*reasons) if reasons else None

    def publish(self, refused: DataFrame, reason: str) -> None:
        """Publish ``refused`` (reader rows, ``reason`` naming the column that says why)."""
        def carried(name: Column) -> Column:
            lowered = F.lower(name)
            keep = ~lowered.isin(*_NOT_CARRIED, self.group_header.lower()) & ~name.rlike(r"[:\\\r\n]")
            for prefix in _BROKER_PREFIXES:
                keep = keep & ~lowered.startswith(prefix)
            return keep

        headers = F.map_concat(
            F.map_filter("headers", lambda name, _: carried(name)),
            F.create_map(F.lit(REASON_HEADER), F.col(reason),
                         F.lit(ORIGIN_HEADER), F.coalesce(F.col("destination"), F.lit("")),
                         F.lit(MESSAGE_ID_HEADER), F.coalesce(F.col("message_id"), F.lit(""))))
        (refused.select("body", "group_id", "priority", headers.alias("headers"))
         .write.format("clustermq").options(**self.writer_options).mode("append").save())
