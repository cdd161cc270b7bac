"""Test driver: the queue_to_delta job, SIGKILLed right after the Delta commit of one batch.

    python tests/drivers/queue_to_delta_killed.py --kill-after-batch N <queue_to_delta flags>

Runs the job's own ``main`` (:mod:`clustermq.jobs.queue_to_delta`) with its ``after_commit``
hook, which the sink calls after a batch's Delta commit and before Spark writes that batch to
its commit log: the exact window the txnVersion idempotence exists for. On the N-th batch that
held rows (from 0) it SIGKILLs its own process group, the driver and its Spark JVM, as a crash
would. Empty batches do not count: Spark plans an empty batch 0 when no message was dispatched
yet at the start (a Classic queue waits ``timeBeforeDispatchStarts`` after its first consumer).

The driver must lead its own process group (``start_new_session=True``), or it would kill
whatever started it. Prints ``fault injection: SIGKILL after the Delta commit of batch B``
just before the kill.
"""

from __future__ import annotations

import os
import signal
import sys

from clustermq.jobs import queue_to_delta
from clustermq.pipelines.delta_sink import BatchReport

FLAG = "--kill-after-batch"


class KillAfterBatch:
    """Counts the batches with rows from the reports; kills the group after the target's commit."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.with_rows = -1
        self.rows_in = 0

    def on_report(self, report: BatchReport) -> None:
        self.rows_in = report.rows_in

    def after_commit(self, batch_id: int) -> None:
        rows_in, self.rows_in = self.rows_in, 0
        if not rows_in:
            return
        self.with_rows += 1
        if self.with_rows == self.target:
            print(f"fault injection: SIGKILL after the Delta commit of batch {batch_id}", flush=True)
            os.killpg(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != FLAG or not argv[1].isdigit():
        print(f"usage: {sys.argv[0]} {FLAG} N <queue_to_delta flags>", file=sys.stderr)
        return 2
    if os.getpgid(0) != os.getpid():
        print(f"{sys.argv[0]}: must lead its own process group (start it with "
              "start_new_session=True)", file=sys.stderr)
        return 2
    hook = KillAfterBatch(int(argv[1]))
    return queue_to_delta.main(argv[2:], on_report=hook.on_report, after_commit=hook.after_commit)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
