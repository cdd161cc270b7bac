"""The comparisons of ``make bench``: each a candidate and the raw-client baseline it is quoted
against. This is the one list to extend: a new step is one more :class:`Pair`.

Each measure does its whole run on the cluster (preload, the timed work, clean-up) and returns a
:class:`Figure`; the runner alternates baseline and candidate (baseline, candidate, baseline, ...)
so slow phases of a shared machine hit both, and quotes the median ratio with its min and max.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clustermq.devtools.bench.delta_run import read_into_delta
from clustermq.devtools.bench.floor import read_floor
from clustermq.devtools.bench.scenarios import (
    Bench,
    Figure,
    drain_quietly,
    read_connector,
    read_raw,
    write_connector,
    write_raw,
)

Measure = Callable[[Bench, int], Figure]

#: maxMessagesPerTrigger of the read comparisons
READ_MAX_PER_TRIGGER = 20_000
#: the Delta warm-up's batch (rows); it runs ``WARM_UP_DELTA_BATCHES`` of them per sink
WARM_UP_DELTA_BATCH = 100
#: batches per warm-up sink: Delta writes its first checkpoint with version 10 (its default
#: ``checkpointInterval``), the 11th commit, and a session's first checkpoint took 11.6 s
#: against 0.4-0.6 s for later ones
WARM_UP_DELTA_BATCHES = 11


def raw_write(b: Bench, n: int) -> Figure:
    fig, queue = write_raw(b, n)
    drain_quietly(b, queue, n)
    return fig


def connector_write(b: Bench, n: int) -> Figure:
    fig, queue = write_connector(b, n)
    drain_quietly(b, queue, n)
    return fig


def connector_write_direct(b: Bench, n: int) -> Figure:
    fig, queue = write_connector(b, n, write_mode="direct")
    drain_quietly(b, queue, n)
    return fig


def warm_up_writer(b: Bench) -> None:
    """One small untimed write: a session's first write spends 10-15 s starting Python workers
    (docs/decisions.md, "Writer modes and the move out of staging"), which would land on the
    first timed candidate only."""
    connector_write(b, 300)


def warm_up_reader(b: Bench) -> None:
    """One small untimed read, for the same reason: a session's first streaming query starts
    the data source's Python workers (docs/decisions.md, "The benchmark's baselines")."""
    reader_noop(b, 300)


def warm_up_delta(b: Bench) -> None:
    """Small untimed Delta appends, through the job's sink and Delta's own, before the timed
    rounds: a session's first Delta write, and its first checkpoint of a table's log, load and
    compile Delta's code, and whichever timed run came first paid it (docs/decisions.md, "The
    benchmark's baselines")."""
    for sink in ("job", "delta"):
        read_floor(b, WARM_UP_DELTA_BATCHES * WARM_UP_DELTA_BATCH, WARM_UP_DELTA_BATCH, sink)


def raw_read(b: Bench, n: int) -> Figure:
    queue = b.new_queue("read-raw")
    b.preload(queue, n)
    return read_raw(b, queue, n)


def reader_noop(b: Bench, n: int) -> Figure:
    queue = b.new_queue("read-noop")
    b.preload(queue, n)
    return read_connector(b, queue, n, READ_MAX_PER_TRIGGER)


def reader_delta(b: Bench, n: int) -> Figure:
    queue = b.new_queue("read-delta")
    b.preload(queue, n)
    return read_into_delta(b, queue, n, READ_MAX_PER_TRIGGER)


def floor_noop(b: Bench, n: int) -> Figure:
    return read_floor(b, n, READ_MAX_PER_TRIGGER, "noop")


def floor_delta(b: Bench, n: int) -> Figure:
    return read_floor(b, n, READ_MAX_PER_TRIGGER, "job")


def floor_plain_delta(b: Bench, n: int) -> Figure:
    return read_floor(b, n, READ_MAX_PER_TRIGGER, "delta")


@dataclass(frozen=True)
class Pair:
    """``key`` is the ``--steps`` name; ``kind`` says which per-message CPU matters (the reader
    process for reads, the driver and workers for writes); ``needs_delta`` skips the pair when
    the Delta jars are not cached."""

    key: str
    title: str
    kind: str
    baseline: Measure
    candidate: Measure
    needs_delta: bool = False


PAIRS: tuple[Pair, ...] = (
    Pair("write", "write: raw stomp.py producers vs the clustermq writer", "write", raw_write, connector_write),
    Pair("write-direct", "write: raw stomp.py producers vs the writer with writeMode=direct", "write",
         raw_write, connector_write_direct),
    Pair("read", "read: raw stomp.py consumers vs the reader into noop", "read", raw_read, reader_noop),
    Pair("delta", "read: raw stomp.py consumers vs queue_to_delta", "read", raw_read, reader_delta,
         needs_delta=True),
    # Spark's share of the two read ratios: the same rows from a source with no broker
    # (bench/floor.py), the same raw consumers as the baseline.
    Pair("floor", "read: raw stomp.py consumers vs a Python source with no broker into noop", "read",
         raw_read, floor_noop),
    Pair("floor-delta", "read: raw stomp.py consumers vs a Python source with no broker into the "
         "Delta sink", "read", raw_read, floor_delta, needs_delta=True),
    Pair("floor-plain-delta", "read: raw stomp.py consumers vs a Python source with no broker "
         "into Delta's own sink", "read", raw_read, floor_plain_delta, needs_delta=True),
)
