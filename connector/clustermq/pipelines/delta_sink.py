"""Queue → Delta: the ``foreachBatch`` function that puts each ``message_id`` in the table once.

Two mechanisms, because each covers what the other cannot:

* **De-duplication by ``message_id``.** The reader is at-least-once: a message can come again,
  flagged ``redelivered``, in a *later* batch (a connection was lost before its ACK), and a
  replayed batch is re-read from the brokers, so it may hold different messages than the lost
  attempt (see the reader's guarantees). Rows are made unique within the batch (grouped by
  key, the first copy kept), and keys with a copy flagged ``redelivered`` are anti-joined
  against the ``message_id`` column of the table. Messages delivered for the first time
  (``redelivered = false``) cannot be in the table yet, so a normal batch costs no table scan.
* **A strict first batch.** The first batch of every run may be a replay of a batch the crashed
  run committed to Delta but not to Spark's commit log, so *every* row of it is anti-joined
  against the table. It is appended with Delta's ``txnAppId`` (the streaming query id, kept in
  the checkpoint) and ``txnVersion`` (the batch id), and the writer then checks that its rows
  arrived (unless that append created the table, which then cannot have skipped it). If
  Delta skipped the append (the crashed run committed it with its transaction id) while the
  replay brought messages that are not in the table (a competing consumer took some of the
  original ones in between), those messages are appended without ``txnVersion``; they are
  acknowledged after this function returns, so skipping them would lose them. That append is
  itself idempotent: a crash right after it leads to the same replay, whose anti-join finds them.

A later batch of the run with no row flagged ``redelivered`` holds each message once and none
the table can hold (the reader flags every repeat: read/copies.py), so it is appended whole in
one Spark job (:mod:`clustermq.pipelines.direct_append`), and without a transaction id: only a
batch of an earlier run can be in Delta's log, and the replay of one is the next run's strict
first batch. That spares Delta the transaction lookup, which rebuilds the table's state in three
Spark jobs on every commit. A flagged row stops that job before Delta commits, and the batch
takes the checked path. The checked path is two Spark jobs of its own: one reads the batch into
a cache, grouped by key, and counts what the report needs (rows, keys, keys with a redelivered
copy, unparsable bodies) in the same pass; the other is the Delta append from that cache. A
batch with redelivered keys (or a strict one) adds the anti-join and a second cached, counted
set. A new pipeline's first batch, into a table with no commit yet, is strict with nothing to
check against, so it too is appended whole when no row is flagged.

Several queries may write one table (competing consumers of one queue, each with its own driver
and checkpoint): their ``txnAppId`` differ, so each keeps its own batch versions, and a batch
whose commit loses to another writer's (the first batches creating the table at once, or an
append whose read of the table another append changed) is decided again on the table as it now
is and appended again (``COMMIT_ATTEMPTS``).

Optionally each body is parsed into typed columns (``BodyParse``, ``--parse json --schema
<DDL>``, :mod:`clustermq.pipelines.body_parse`); a body that does not parse is written too,
never dropped, and every batch report counts them.

Chosen over ``MERGE``: a MERGE scans and rewrites table files for every batch, while the
anti-join runs only for redelivered rows and the first batch of a run, and appends never
rewrite files (no conflicts with readers, cheap time travel).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from clustermq.errors import JobConfigError
from clustermq.pipelines.body_parse import BodyParse
from clustermq.pipelines.direct_append import DirectCounts, Fallback, append_direct
from clustermq.pipelines.park import Parking
from clustermq.pipelines.table_columns import (
    ANY_REDELIVERED,
    COPIES,
    CORRUPT_COLUMN,
    KEY,
    OPTIONAL_READER_COLUMNS,
    PARK_REASON,
    TABLE_COLUMNS,
    WORKING_COLUMNS,
    stamped,
)

log = logging.getLogger("clustermq.delta_sink")

DEDUPE_SCOPES = ("redelivered", "all")
#: Off by default: a cached plan keeps ``spark.sql.shuffle.partitions`` partitions, so with
#: Spark's 200 every batch wrote 200 files of ~100 rows (a 20,000-row batch: 10.5 s instead of
#: 1.6-1.9 s with it on, one file instead of 200: docs/design.md, "Pipelines: exactly once
#: into Delta").
ADAPTIVE_CACHED_PARTITIONS = "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning"


#: How often a batch is attempted when other writers of the same table commit first (several
#: queries on one queue into one table: "Scaling past one driver" in the README). Each attempt
#: decides again what the table lacks; the ``txnAppId``/``txnVersion`` append keeps a repeated
#: attempt from writing twice.
COMMIT_ATTEMPTS = 10
#: How deep into a JVM exception's causes a commit conflict's condition is looked for.
JAVA_CAUSES_LOOKED_AT = 8
#: Delta's error conditions for a commit that lost to a concurrent one (Delta's
#: ``DeltaConcurrentModificationException`` family, error/delta-error-classes.json): two first
#: batches creating the table at once, or an append whose read of the table another append
#: changed.
CONCURRENT_COMMIT_CONDITIONS = frozenset({
    "DELTA_CONCURRENT_APPEND", "DELTA_CONCURRENT_DELETE_DELETE", "DELTA_CONCURRENT_DELETE_READ",
    "DELTA_CONCURRENT_TRANSACTION", "DELTA_CONCURRENT_WRITE", "DELTA_METADATA_CHANGED",
    "DELTA_PROTOCOL_CHANGED",
})


def concurrent_commit_condition(exc: BaseException) -> str | None:
    """Delta's error condition when ``exc`` says another writer committed first, else None.

    Read from error conditions, not classes, so the connector needs no Delta Python package:
    the condition PySpark carries over (also through Spark Connect), or, for a JVM error that
    reaches ``foreachBatch`` unconverted (a ``Py4JJavaError``, measured for Delta's commit
    conflicts), the ``SparkThrowable`` condition of the JVM exception and its causes.
    """
    for condition in _error_conditions(exc):
        if condition.split(".")[0] in CONCURRENT_COMMIT_CONDITIONS:
            return condition
    return None


def _error_conditions(exc: BaseException) -> Iterator[str]:
    get = getattr(exc, "getCondition", None)
    condition = get() if callable(get) else None
    if isinstance(condition, str):
        yield condition
    java = getattr(exc, "java_exception", None)
    for _ in range(JAVA_CAUSES_LOOKED_AT):
        if java is None:
            return
        try:
            condition = java.getCondition()  # only a SparkThrowable has one
        except Exception:
            condition = None
        if isinstance(condition, str):
            yield condition
        java = java.getCause()


class BatchCounts(NamedTuple):
    """What the batch's one counting job found; named because a batch and its fresh keys read
    different fields of it."""

    rows_in: int  #: rows the source delivered, copies included
    keys: int  #: distinct dedupe keys
    redelivered: int  #: keys with a copy the broker flagged as redelivered
    corrupt: int | None  #: unparsable bodies to write (None without body parsing)
    parked: int  #: keys to park instead of writing


@dataclass
class BatchReport:
    """What one micro-batch did; printed by the job and kept for tests and the demo."""

    batch_id: int
    rows_in: int
    duplicates_in_batch: int
    already_in_table: int
    written: int
    replay_rows_appended: int = 0
    #: rows written whose body did not parse (only with a ``BodyParse``); ``None`` without one
    corrupt: int | None = None
    #: rows the table would refuse, published to the park queue (only with a ``Parking``)
    parked: int = 0
    park_queue: str | None = None
    #: appended whole in one job (pipelines/direct_append.py), not by the checked path
    direct: bool = False

    def line(self) -> str:
        text = (f"batch {self.batch_id}: {self.rows_in} rows read, "
                f"{self.duplicates_in_batch} duplicates within the batch, "
                f"{self.already_in_table} already in the table, {self.written} written")
        if self.replay_rows_appended:
            text += (f" ({self.replay_rows_appended} appended after Delta skipped an "
                     "already-committed replay)")
        if self.corrupt is not None and self.park_queue is None:
            text += f", {self.corrupt} unparsable (kept with their body in {CORRUPT_COLUMN})"
        if self.park_queue is not None:
            text += f", {self.parked} parked in {self.park_queue}"
        return text


@dataclass
class DeltaSinkTotals:
    batches: int = 0
    rows_in: int = 0
    duplicates_dropped: int = 0
    written: int = 0
    corrupt: int = 0
    parked: int = 0
    reports: list[BatchReport] = field(default_factory=list)


def delta_table_exists(spark: SparkSession, path: str) -> bool:
    """True when ``path`` holds a Delta table with a commit, on any Hadoop FS (Delta's own check).

    A ``_delta_log`` folder alone is not enough: another query creating the table makes the
    folder before its first commit, and a batch that took that for a table failed its read with
    DELTA_TABLE_NOT_FOUND (measured with two queries on one table).
    """
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return bool(jvm.io.delta.tables.DeltaTable.isDeltaTable(spark._jsparkSession, path))


class IdempotentDeltaWriter:
    """``foreachBatch`` function writing reader rows into the Delta table at ``path``.

    One object per query run: its first call is the batch that may be a replay.
    ``set_app_id`` must be called with the query id once ``start()`` returned (the first
    batch waits for it); the id survives restarts because Spark keeps it in the checkpoint.
    """

    def __init__(
        self,
        path: str,
        dedupe: str = "redelivered",
        on_report: Callable[[BatchReport], None] | None = None,
        after_commit: Callable[[int], None] | None = None,
        id_header: str | None = None,
        parse: BodyParse | None = None,
        park: Parking | None = None,
    ) -> None:
        if dedupe not in DEDUPE_SCOPES:
            raise JobConfigError(f"dedupe (--dedupe) must be one of {', '.join(DEDUPE_SCOPES)}, got {dedupe!r}")
        self.path = path
        self.parse = parse
        self.park = park
        #: the table's columns; reader columns an option adds and a parse's columns (with
        #: ``_corrupt``) join them in __call__, where the batch and a SparkSession exist
        self.columns: tuple[str, ...] = TABLE_COLUMNS
        self.dedupe = dedupe
        self.id_header = id_header
        self.on_report = on_report
        self.after_commit = after_commit
        self.totals = DeltaSinkTotals()
        self._app_id: str | None = None
        self._app_id_set = threading.Event()
        self._first = True
        self._exists = False
        #: the last batch id this run handled: a later one cannot be in Delta's log yet
        self._last_batch: int | None = None

    def set_app_id(self, app_id: str) -> None:
        self._app_id = app_id
        self._app_id_set.set()

    def _wait_app_id(self) -> str:
        if not self._app_id_set.wait(120):
            raise RuntimeError("IdempotentDeltaWriter: set_app_id() was never called")
        assert self._app_id is not None
        return self._app_id

    def _key(self) -> Column:
        """What identifies a message: ``message_id``, or a producer's id header when given.

        Artemis gives a message a new ``message-id`` (and no redelivered flag) when it moves
        it to another node; a header the producer set survives the move.
        """
        if self.id_header:
            return F.coalesce(F.col("headers")[self.id_header], F.col("message_id"))
        return F.col("message_id")

    def _table_ids(self, spark: SparkSession) -> DataFrame:
        """The table's message keys as of now (a fresh snapshot on every call)."""
        return spark.read.format("delta").load(self.path).select(self._key().alias(KEY))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        app_id = self._wait_app_id()
        spark = batch.sparkSession
        # A batch id this run already handled is a replay (the query was restarted with this
        # sink): Delta's log may hold it without its transaction id (a blind direct append).
        replay = self._last_batch is not None and batch_id <= self._last_batch
        strict = self._first or self.dedupe == "all" or replay
        if self._first:
            # The stream's own session (Spark clones the user's for every query, and hands every
            # batch of a run the same clone): let adaptive execution size the cached batch's
            # partitions, hence the files each append writes.
            spark.conf.set(ADAPTIVE_CACHED_PARTITIONS, "true")
        self._first = False
        optional = tuple(c for c in OPTIONAL_READER_COLUMNS if c in batch.columns)
        self.columns = TABLE_COLUMNS + optional + (self.parse.columns() if self.parse else ())
        # Marked handled before anything is written: an append that committed and then failed
        # makes its batch a replay for this sink too.
        previous, self._last_batch = self._last_batch, batch_id
        direct = self._direct(batch, batch_id, app_id, strict, spark)
        if isinstance(direct, DirectCounts):
            self._finish(BatchReport(batch_id=batch_id, rows_in=direct.rows, duplicates_in_batch=0,
                                     already_in_table=0, written=direct.rows, corrupt=direct.corrupt,
                                     direct=True))
            return
        if direct == "unobserved":  # Delta may have skipped it: decide it on the table
            log.warning("clustermq delta sink: batch %d (after batch %s): the append returned no "
                        "counts; checking the batch against the table", batch_id, previous)
            strict = True
        unique = self._unique(batch, batch_id)
        reason = self._park_reason(spark)
        if reason is not None:
            unique = unique.withColumn(PARK_REASON, reason)
        # Persisted so that the write sees the rows the counts saw without reading the source
        # again, and the same ingest_time (current_timestamp is evaluated per query).
        unique = unique.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            # One job reads the batch, fills the cache and counts everything a batch reports.
            counts = self._counts(unique, with_copies=True, parking=reason is not None)
            rows_in, unique_count, redelivered = counts.rows_in, counts.keys, counts.redelivered
            corrupt, parked = counts.corrupt, counts.parked
            kept = unique
            if parked:
                kept = self._publish_refused(unique, parked)
            for attempt in range(1, COMMIT_ATTEMPTS + 1):
                try:
                    written, corrupt, appended = self._append(
                        spark, kept, unique_count - parked, corrupt, strict=strict,
                        redelivered=redelivered, app_id=app_id, batch_id=batch_id)
                    break
                except Exception as exc:
                    condition = concurrent_commit_condition(exc)
                    if condition is None or attempt == COMMIT_ATTEMPTS:
                        raise
                    log.warning("clustermq delta sink: batch %d: another writer committed to the "
                                "table first (%s); attempt %d of %d", batch_id, condition,
                                attempt + 1, COMMIT_ATTEMPTS)
        finally:
            unique.unpersist()
        self._finish(BatchReport(
            batch_id=batch_id,
            rows_in=rows_in,
            duplicates_in_batch=rows_in - unique_count,
            already_in_table=unique_count - parked - written,
            written=written,
            replay_rows_appended=appended,
            corrupt=corrupt,
            parked=parked,
            park_queue=self.park.queue if self.park is not None else None,
        ))

    def _direct(
        self, batch: DataFrame, batch_id: int, app_id: str, strict: bool, spark: SparkSession,
    ) -> DirectCounts | Fallback | None:
        """The batch appended whole in one job (pipelines/direct_append.py) where the reader's
        flags say it holds only first deliveries; ``None`` where that cannot be known: rows keyed
        by an id header (the reader flags by ``message_id``), a park queue (its check reads the
        table), or a strict batch into a table that has a commit (a replay may be in it).

        A strict batch into a table with no commit yet (a new pipeline's first) holds nothing
        the table can hold; it keeps its transaction id, as every strict batch does, so that a
        replay of it is skipped. A later batch of the run is a blind append: only a batch of an
        earlier run can be in Delta's log, and the first batch of every run is strict. Another
        writer's commit first sends the batch to the checked path, which retries."""
        if self.id_header or self.park is not None or self.dedupe == "all":
            return None
        txn_app_id: str | None = None
        if strict:
            if self._table_has_commit(spark):
                return None
            txn_app_id = app_id
        try:
            outcome = append_direct(batch, batch_id, self.columns, self.path, txn_app_id, self.parse)
        except Exception as exc:
            condition = concurrent_commit_condition(exc)
            if condition is None:
                raise
            log.warning("clustermq delta sink: batch %d: another writer committed to the table "
                        "first (%s); taking the checked path", batch_id, condition)
            return "conflict"
        if isinstance(outcome, DirectCounts):
            self._exists = True
        return outcome

    def _table_has_commit(self, spark: SparkSession) -> bool:
        """Whether the table has a commit, asked of Delta until it has one (then it always will)."""
        if not self._exists:
            self._exists = delta_table_exists(spark, self.path)
        return self._exists

    def _finish(self, report: BatchReport) -> None:
        """Count, log and hand on what a batch did, then signal its commit."""
        batch_id, rows_in, written = report.batch_id, report.rows_in, report.written
        corrupt, parked = report.corrupt, report.parked
        self.totals.batches += 1
        self.totals.corrupt += corrupt or 0
        self.totals.parked += parked
        self.totals.rows_in += rows_in
        self.totals.duplicates_dropped += rows_in - written - parked
        self.totals.written += written
        self.totals.reports.append(report)
        if corrupt:
            log.warning("clustermq delta sink: batch %d: %d bodies did not parse as %s; kept "
                        "with the body in column %s", batch_id, corrupt,
                        self.parse.format if self.parse else "", CORRUPT_COLUMN)
        log.info("clustermq delta sink: %s", report.line())
        if self.on_report:
            self.on_report(report)
        if self.after_commit:
            self.after_commit(batch_id)

    def _park_reason(self, spark: SparkSession) -> Column | None:
        """With a park queue: the column that says why the table would refuse a row."""
        if self.park is None:
            return None
        corrupt = self.parse.corrupt_column if self.parse is not None else None
        return self.park.reason(spark, self.path, self._table_has_commit(spark), self.columns, corrupt)

    def _publish_refused(self, unique: DataFrame, parked: int) -> DataFrame:
        """Publish the ``parked`` rows the table would refuse to the park queue, before the
        append (so a parked message is on that queue before its original is acknowledged);
        the rows left."""
        assert self.park is not None
        self.park.publish(unique.where(F.col(PARK_REASON).isNotNull()), PARK_REASON)
        log.warning("clustermq delta sink: %d rows the table would refuse parked in %s",
                    parked, self.park.queue)
        return unique.where(F.col(PARK_REASON).isNull())

    def _append(
        self, spark: SparkSession, unique: DataFrame, unique_count: int, corrupt: int | None, *,
        strict: bool, redelivered: int, app_id: str, batch_id: int,
    ) -> tuple[int, int | None, int]:
        """Append the batch's keys the table lacks: (written, unparsable among them, rows
        appended after Delta skipped an already-committed replay).

        Everything that depends on the table is decided here, so that an attempt after a
        concurrent writer's commit decides it again on the table as that writer left it.
        """
        existed = self._table_has_commit(spark)
        fresh, written, appended = unique, unique_count, 0
        try:
            if existed and (strict or redelivered):
                fresh = self._fresh(spark, unique, strict).persist(StorageLevel.MEMORY_AND_DISK)
                fresh_counts = self._counts(fresh, with_copies=False)
                written, corrupt = fresh_counts.keys, fresh_counts.corrupt
            (fresh.select(*self.columns).write.format("delta").mode("append")
             .option("txnAppId", app_id).option("txnVersion", batch_id)
             .save(self.path))
            self._exists = True
            # Delta skips the append only for a table whose log already holds this app id at
            # this version: a table created by this very append cannot have skipped it.
            if strict and written and existed:
                appended = self._append_if_skipped(spark, fresh)
        finally:
            if fresh is not unique:
                fresh.unpersist()
        return written, corrupt, appended

    def _unique(self, batch: DataFrame, batch_id: int) -> DataFrame:
        """The batch with one row per key (the first copy, as ``dropDuplicates`` keeps), how many
        copies the batch had, and whether *any* copy was flagged ``redelivered``: a flagged copy
        sends the key to the table check even when the copy kept is the unflagged one."""
        keyed = batch.withColumn(KEY, self._key())
        kept = [c for c in keyed.columns if c != KEY]
        unique = stamped(
            keyed.groupBy(KEY)
            .agg(*(F.first(c).alias(c) for c in kept),
                 F.count(F.lit(1)).alias(COPIES),
                 F.max(F.col("redelivered")).alias(ANY_REDELIVERED)),
            batch_id)
        if self.parse is not None:
            unique = self.parse.apply(unique)
        return unique.select(*WORKING_COLUMNS, *self.columns)

    def _counts(self, rows: DataFrame, with_copies: bool, parking: bool = False) -> BatchCounts:
        """:class:`BatchCounts` in one aggregation. The second count of a batch (its fresh keys,
        ``with_copies`` false) needs only the keys and the unparsable bodies. A parked row is not
        written, so its unparsable body is not counted (with a park queue every unparsable body
        is parked).
        """
        aggregates = [F.sum(COPIES) if with_copies else F.lit(0), F.count(F.lit(1)),
                      F.sum(F.col(ANY_REDELIVERED).cast("long")) if with_copies else F.lit(0),
                      F.count(F.col(PARK_REASON)) if parking else F.lit(0)]
        if self.parse is not None:
            unparsable = F.col(self.parse.corrupt_column)
            if parking:
                unparsable = F.when(F.col(PARK_REASON).isNull(), unparsable)
            aggregates.append(F.count(unparsable))
        row = rows.agg(*aggregates).first()
        assert row is not None
        corrupt = int(row[4] or 0) if self.parse is not None else None
        return BatchCounts(rows_in=int(row[0] or 0), keys=int(row[1] or 0),
                           redelivered=int(row[2] or 0), corrupt=corrupt, parked=int(row[3] or 0))

    def _fresh(self, spark: SparkSession, unique: DataFrame, strict: bool) -> DataFrame:
        """The keys not in the table yet: every key of a strict batch is checked, otherwise only
        those with a redelivered copy (a first delivery cannot be in the table)."""
        if strict:
            return unique.join(self._table_ids(spark), KEY, "left_anti").select(unique.columns)
        flagged = F.col(ANY_REDELIVERED)
        return unique.where(~flagged).unionByName(
            unique.where(flagged).join(self._table_ids(spark), KEY, "left_anti")
            .select(unique.columns))

    def _append_if_skipped(self, spark: SparkSession, fresh: DataFrame) -> int:
        """After a ``txnVersion`` append: append (without it) the rows Delta did not take.

        ``fresh`` holds only ids absent from the table before the append, so rows still absent
        now were skipped because this batch id was committed by an earlier run.
        """
        missing = fresh.join(self._table_ids(spark), KEY, "left_anti").select(
            *self.columns
        ).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            count = missing.count()
            if count:
                log.warning(
                    "clustermq delta sink: batch already committed by an earlier run; its "
                    "replay brought %d messages that are not in the table: appending them", count)
                missing.write.format("delta").mode("append").save(self.path)
            return count
        finally:
            missing.unpersist()

