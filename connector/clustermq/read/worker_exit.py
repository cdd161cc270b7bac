"""Turn the end Spark gives a stream's Python worker into an orderly stop.

A Python streaming source lives in a worker process of its own
(``pyspark.sql.streaming.python_streaming_source_runner``). When its query stops or fails, Spark
does not ask the worker to stop: it destroys the process (``Process.destroy``: SIGTERM, and the
worker's factory may destroy it again as it stops). Python's default SIGTERM action ends the process
at once: the reader's ``stop()`` would never run, and every broker connection would end as a
failed connection rather than with a DISCONNECT. On Artemis 2.40 that matters (measured: every
failing run's connection logged "Connection failure has been detected"): the two cleanups a
failed STOMP connection gets race, counting every held message as a delivery in some runs, and
can leave the head of a consumer's deliveries counted on its node and delivered to no one
(docs/broker-behaviour.md, "A message stranded after a killed driver"; a failing query's replay
then came one message short).

The runner calls the reader's ``stop()`` in a ``finally`` around its request loop. Raising
``SystemExit`` from the SIGTERM handler unwinds the main thread out of whatever it waits on
(the next request, usually) through that ``finally``, so the reader's own stop closes every
connection in order. Later SIGTERMs are ignored so that they cannot cut that stop short; a
watchdog ends the process if the stop itself hangs.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

#: the module Spark runs a Python streaming source's worker as
SOURCE_RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
#: how long the orderly stop may take before the process ends anyway: the reader's stop closes
#: each connection within a few seconds (``stomp_connection``'s DISCONNECT grace)
STOP_DEADLINE_S = 30.0


def in_source_runner() -> bool:
    """Whether this process is Spark's worker for a Python streaming source."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == SOURCE_RUNNER


def stop_in_order_on_sigterm() -> bool:
    """In a source runner's main thread, make SIGTERM unwind through the runner's ``finally``
    (the reader's ``stop()``) instead of ending the process there; whether it is installed.

    Anywhere else (a driver, a test process, a thread) the process's own SIGTERM handling is
    left alone.
    """
    if not in_source_runner() or threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not _unwind:
        signal.signal(signal.SIGTERM, _unwind)
    return True


def _unwind(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    watchdog = threading.Timer(STOP_DEADLINE_S, os._exit, (128 + signum,))
    watchdog.daemon = True
    watchdog.start()
    raise SystemExit(128 + signum)
