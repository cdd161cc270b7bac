"""Measurements taken *while* a scenario runs: queue depth per node, resident memory.

Both run in a background thread and sample at a fixed interval, so a plot of throughput over
time per node and a memory curve come out of the same run that produced the headline figure.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import TypeVar

from clustermq.broker.depth import queue_depths
from clustermq.broker.settings import ConnectionOptions


@dataclass
class DepthSeries:
    """``(seconds since start, {node: depth})`` samples; gaps where a node did not answer."""

    samples: list[tuple[float, dict[str, int | None]]] = field(default_factory=list)


_S = TypeVar("_S", bound="_Sampler")


class _Sampler:
    """A daemon thread calling ``sample(t)`` every ``interval_s`` until the ``with`` ends."""

    def __init__(self, interval_s: float, name: str) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._t0 = 0.0

    def __enter__(self: _S) -> _S:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample(round(time.monotonic() - self._t0, 2))
            self._stop.wait(self.interval_s)

    def sample(self, at: float) -> None:
        raise NotImplementedError


class DepthSampler(_Sampler):
    """Polls the queue depth of every node until stopped (context manager)."""

    def __init__(self, options: ConnectionOptions, queue: str, interval_s: float = 1.0) -> None:
        super().__init__(interval_s, "bench-depth")
        self.options = options
        self.queue = queue
        self.series = DepthSeries()

    def sample(self, at: float) -> None:
        username, password = self.options.login
        depths = queue_depths(self.options.nodes, self.queue, username, password, timeout=5.0)
        self.series.samples.append((at, dict(depths)))


def _rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\x00", b" ").decode(errors="replace")
    except OSError:
        return ""


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
            ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            found.append(child)
            todo.append(child)
    return found


class MemorySampler(_Sampler):
    """Resident memory of the Spark JVM and of the Python process that holds the reader.

    The reader's subscriptions live in the Python process Spark starts for a Python streaming
    source (``python_streaming_source_runner``), a descendant of the JVM, not in the driver's
    own interpreter: that is the "driver-side Python process" whose memory must stay flat.
    """

    def __init__(self, jvm_pid: int, interval_s: float = 0.5) -> None:
        super().__init__(interval_s, "bench-memory")
        self.jvm_pid = jvm_pid
        self.samples: list[tuple[float, int, int]] = []  # (t, jvm KiB, reader KiB)

    def reader_pids(self) -> list[int]:
        return [p for p in _descendants(self.jvm_pid) if "streaming_source" in _cmdline(p)]

    def sample(self, at: float) -> None:
        jvm = _rss_kib(self.jvm_pid) or 0
        reader = sum(_rss_kib(p) or 0 for p in self.reader_pids())
        self.samples.append((at, jvm, reader))

    def peak(self) -> tuple[int, int]:
        """Peak (JVM, reader) RSS in KiB."""
        if not self.samples:
            return 0, 0
        return max(s[1] for s in self.samples), max(s[2] for s in self.samples)
