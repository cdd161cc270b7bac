"""CPU time per message of the processes a run keeps busy, read from ``/proc``.

The gap between the connector and a raw client on a 2-core machine is CPU, not waiting: the
brokers, the Spark JVM, the reader's Python process and the Python workers share the cores. So
every run records what each process class spent, and the report divides by the messages moved.
"""

from __future__ import annotations

import os
import time
from typing import Any

from clustermq.devtools.bench.probes import _cmdline, _descendants, _Sampler

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
    clients, the load generator and the writer's move run), the Spark JVM, the reader process and
    the Python workers. Processes under the JVM are sampled every ``interval_s``; one that ends
    between two samples loses at most that interval of its CPU."""

    def __init__(self, jvm_pid: int | None, interval_s: float = 0.5) -> None:
        super().__init__(interval_s, "bench-cpu")
        self.jvm_pid = jvm_pid
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
        for pid, last in self._last.items():
            kind = "jvm" if pid == self.jvm_pid else self._kinds.get(pid, "other")
            if kind in spent:
                spent[kind] += max(0.0, last - self._first.get(pid, 0.0))
        self.seconds = {k: round(v, 2) for k, v in spent.items()}

    def sample(self, at: float) -> None:
        self._scan(baseline=False)

    def _scan(self, baseline: bool) -> None:
        if self.jvm_pid is None:
            return
        for pid in [self.jvm_pid, *_descendants(self.jvm_pid)]:
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
