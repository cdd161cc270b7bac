"""How a job runs its streaming query: the trigger flag, clean stops on signals, progress.

Shared by the jobs (:mod:`clustermq.jobs`) and the demo, so that a stop or a progress line means the
same in each. Spark's types are imported for type checking only: nothing here runs Spark code
of its own, it drives the query it is given.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from clustermq.broker.depth import connection_depths, format_depth_table
from clustermq.errors import JobConfigError
from clustermq.options import ReadOptions

if TYPE_CHECKING:
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery


def check_trigger(trigger: str, source: str = "--trigger") -> None:
    """``JobConfigError`` unless ``trigger`` is ``availableNow`` or ``processingTime=<interval>``.

    A job checks its flag with this before any Spark work; ``source`` names where the value
    came from (the flag, or the flag and its config key).
    """
    if trigger != "availableNow" and not trigger.startswith("processingTime="):
        raise JobConfigError(
            f"{source}: '{trigger}' is not availableNow or processingTime=<interval>"
        )


def apply_trigger(writer: DataStreamWriter, trigger: str) -> DataStreamWriter:
    """``availableNow`` or ``processingTime=<interval>`` on a ``DataStreamWriter``."""
    check_trigger(trigger)
    if trigger == "availableNow":
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=trigger.split("=", 1)[1])


def run_until_done(query: StreamingQuery, on_tick: Callable[[], None] | None = None) -> None:
    """Wait for the query; SIGTERM/SIGINT stop it cleanly (acks stay tied to commits).

    A stop between batches loses nothing; a stop during a batch leaves that batch for the
    next run (replayed from the checkpoint), like a crash. ``on_tick`` runs about once a
    second (progress lines) and once more at the end.

    A failed query raises its ``StreamingQueryException`` as Spark gave it: its text holds the
    cause (a connector error raised in the source's Python process appears there as
    ``clustermq.errors.<Class>: <message>``), which a job reports in one line
    (:func:`clustermq.jobs.runner.describe_failure`).
    """
    stop = threading.Event()

    def request_stop(signum: int, frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while query.isActive:
            if stop.is_set():
                print("stopping the query (signal received)", file=sys.stderr, flush=True)
                query.stop()
                break
            query.awaitTermination(1)
            if on_tick is not None:
                on_tick()
        if on_tick is not None:
            on_tick()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    error = query.exception()
    if error is not None:
        raise error


def progress_field(progress: Any, name: str) -> Any:
    """A field of a progress record, whichever form PySpark returns (dict or object)."""
    return progress[name] if isinstance(progress, dict) else getattr(progress, name)


def lag_line(progress: Any) -> str | None:
    """``lag after batch N: <node> backlog B, buffered b, acknowledged a; ...`` from the
    reader's ``latestOffset`` in a progress record (``None`` when it carries no lag)."""
    for source in progress_field(progress, "sources") or []:
        latest = source["latestOffset"] if isinstance(source, dict) else source.latestOffset
        if isinstance(latest, str):
            try:
                latest = json.loads(latest)
            except ValueError:
                continue
        if not isinstance(latest, dict) or not all(isinstance(v, dict) for v in latest.values()):
            continue
        parts = []
        for node, lag in latest.items():
            backlog = f"backlog {lag['backlog']}, " if "backlog" in lag else ""
            parts.append(f"{node} {backlog}buffered {lag.get('buffered', 0)}, "
                         f"acknowledged {lag.get('acknowledged', 0)}")
        return f"lag after batch {progress_field(progress, 'batchId')}: " + "; ".join(parts)
    return None


class LagLines:
    """Prints the reader's lag once per finished micro-batch (an ``on_tick`` for run_until_done)."""

    def __init__(self, query: StreamingQuery) -> None:
        self.query = query
        self._seen: set[int] = set()

    def __call__(self) -> None:
        for progress in self.query.recentProgress:
            batch = progress_field(progress, "batchId")
            rows = progress_field(progress, "numInputRows")
            if batch in self._seen or not rows:
                continue
            self._seen.add(batch)
            self.report(batch, int(rows), progress)

    def report(self, batch: int, rows: int, progress: Any) -> None:
        line = lag_line(progress)
        if line:
            print(line, flush=True)


class StreamProgress(LagLines):
    """Prints one line per finished micro-batch: messages so far against the measured backlog,
    then the lag."""

    def __init__(self, query: StreamingQuery, backlog: int | None, what: str = "exported") -> None:
        super().__init__(query)
        self.backlog = backlog
        self.what = what
        self.done = 0

    def report(self, batch: int, rows: int, progress: Any) -> None:
        self.done += rows
        print(self.line(batch), flush=True)
        super().report(batch, rows, progress)

    def line(self, batch: int) -> str:
        if self.backlog:
            pct = 100.0 * self.done / self.backlog
            return f"batch {batch}: {self.what} {self.done} of {self.backlog} messages ({pct:.0f}%)"
        return f"batch {batch}: {self.what} {self.done} messages"


def measure_backlog(options: Mapping[str, str]) -> tuple[int | None, str]:
    """The queue's depth over all nodes (``None`` if a node did not answer) and a table of it.

    ``options`` are the job's reader options, parsed as the reader parses them, so the probe
    connects as the reader does (credentials, ``sslCaFile`` and the other TLS settings) and a
    malformed option fails here, before any message is consumed.
    """
    depths = connection_depths(ReadOptions.parse(options).connection)
    total = depths.total if depths.complete else None
    return total, format_depth_table(depths)
