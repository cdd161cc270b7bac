"""Measurements taken *while* a scenario runs: queue depth per node, resident memory.

Each runs in a background thread and samples at a fixed interval, so a plot of throughput over
time per node, a memory curve and the CPU per message come out of the same run that produced the
headline figure. CPU is measured because the gap between the connector and a raw client on a
2-core machine is CPU, not waiting: the brokers, the Spark JVM, the reader's Python process and
the Python workers share the cores.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

from clustermq.broker.connection_options import ConnectionOptions
from clustermq.broker.depth import queue_depths


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


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of one live process (its own threads, not its reaped children)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        fields = stat[stat.rindex(b")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, ValueError, IndexError):
        return None


def _kind(pid: int) -> str:
    """``reader`` for the Python process Spark starts for a streaming source (it holds the
    reader's connections), ``workers`` for every other Python process under the JVM."""
    cmd = _cmdline(pid)
    if "streaming_source" in cmd:
        return "reader"
    return "workers" if "python" in cmd or "pyspark" in cmd else "other"


class CpuMeter(_Sampler):
    """CPU seconds spent during the ``with`` by: this process (the bench's driver, where the raw
    clients, the load generator and the writer's move run), the Spark JVM, the reader process,
    the Python workers and the brokers (``broker_pids``: the local cluster's node processes, so a
    run on a saturated machine shows how much of it the brokers took). Processes are sampled
    every ``interval_s``; one that ends between two samples loses at most that interval of its
    CPU."""

    def __init__(self, jvm_pid: int | None, interval_s: float = 0.5,
                 broker_pids: tuple[int, ...] = ()) -> None:
        super().__init__(interval_s, "bench-cpu")
        self.jvm_pid = jvm_pid
        self.broker_pids = broker_pids
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._kinds: dict[int, str] = {}
        self._self0 = 0.0
        self.seconds: dict[str, float] = {}

    def __enter__(self) -> CpuMeter:
        self._self0 = time.process_time()
        self._scan(baseline=True)
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._scan(baseline=False)
        spent = {"driver": time.process_time() - self._self0, "jvm": 0.0, "reader": 0.0, "workers": 0.0}
        if self.broker_pids:
            spent["brokers"] = 0.0
        for pid, last in self._last.items():
            kind = ("jvm" if pid == self.jvm_pid else "brokers" if pid in self.broker_pids
                    else self._kinds.get(pid, "other"))
            if kind in spent:
                spent[kind] += max(0.0, last - self._first.get(pid, 0.0))
        self.seconds = {k: round(v, 2) for k, v in spent.items()}

    def sample(self, at: float) -> None:
        self._scan(baseline=False)

    def _scan(self, baseline: bool) -> None:
        pids = [*self.broker_pids]
        if self.jvm_pid is not None:
            pids += [self.jvm_pid, *_descendants(self.jvm_pid)]
        for pid in pids:
            cpu = _cpu_s(pid)
            if cpu is None:
                continue
            if pid not in self._kinds:
                self._kinds[pid] = _kind(pid)
                if baseline:
                    self._first[pid] = cpu
            self._last[pid] = cpu

    def per_message(self, messages: int) -> dict[str, Any]:
        """``cpu_s`` per process class and µs per message for each (0 messages: none)."""
        out: dict[str, Any] = {"cpu_s": dict(self.seconds)}
        if messages > 0:
            out["cpu_us_per_msg"] = {k: round(v * 1e6 / messages, 1) for k, v in self.seconds.items()}
        return out


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine since boot, over all cores (/proc/stat)."""
    with open("/proc/stat") as handle:
        fields = [int(v) for v in handle.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


class MachineLoad:
    """The share of the machine's cores that were busy during the ``with`` (every process: the
    brokers, Spark, the bench). Near 1.0 the machine, not the measured code, set the pace."""

    def __enter__(self) -> MachineLoad:
        self._start = _machine_ticks()
        self.busy_share: float | None = None
        return self

    def __exit__(self, *exc: object) -> None:
        busy, total = _machine_ticks()
        spent = total - self._start[1]
        self.busy_share = round((busy - self._start[0]) / spent, 3) if spent > 0 else None
