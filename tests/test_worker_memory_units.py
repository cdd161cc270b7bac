"""The source worker's fixed mmap threshold: a batch's blocks stay out of the heap."""

from __future__ import annotations

import subprocess
import sys

import pytest

_STAND_IN = """
import importlib.machinery, sys
from clustermq.read import worker_exit, worker_memory
role = sys.argv[1]
if role == "runner":
    sys.modules["__main__"].__spec__ = importlib.machinery.ModuleSpec(worker_exit.SOURCE_RUNNER, None)
fixed = worker_memory.keep_batches_out_of_the_heap()

def mappings():
    with open("/proc/self/maps") as handle:
        return {line.split()[0] for line in handle if "[heap]" not in line}

def size(span):
    start, end = (int(x, 16) for x in span.split("-"))
    return end - start

first = bytearray(4 * 1024 * 1024)  # a batch's block: mapped, and then freed
del first  # glibc's dynamic threshold, unless fixed, rises to 4 MiB here
before = mappings()
block = bytearray(2 * 1024 * 1024)  # the next batch's block
mapped = any(size(span) >= 2 * 1024 * 1024 for span in mappings() - before)
print(fixed, mapped)
"""


@pytest.mark.parametrize("role, expected", [("runner", "True True"), ("other", "False False")])
def test_the_source_worker_maps_every_batch_block_and_other_processes_keep_glibc_defaults(
        role: str, expected: str) -> None:
    """In Spark's worker for a streaming source a 2 MiB block is mapped on its own even after a
    larger one was freed; elsewhere glibc's dynamic threshold has risen to the larger block and
    serves the 2 MiB from the heap, where a long drain's blocks fragmented it (the creep the
    fixed threshold stops: docs/design.md, "Reader memory")."""
    done = subprocess.run([sys.executable, "-c", _STAND_IN, role], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected, (
        f"{role}: (threshold fixed, 2 MiB block mapped on its own) = {done.stdout.strip()}, "
        f"expected {expected}; stderr: {done.stderr}")


def test_the_threshold_is_fixed_once_per_process() -> None:
    """A second reader in the same worker does not call into the C library again."""
    done = subprocess.run([sys.executable, "-c", (
        "import importlib.machinery, sys\n"
        "from clustermq.read import worker_exit, worker_memory\n"
        "sys.modules['__main__'].__spec__ = importlib.machinery.ModuleSpec(worker_exit.SOURCE_RUNNER, None)\n"
        "calls = []\n"
        "real = worker_memory.fix_mmap_threshold\n"
        "worker_memory.fix_mmap_threshold = lambda: calls.append(1) or real()\n"
        "print(worker_memory.keep_batches_out_of_the_heap(), worker_memory.keep_batches_out_of_the_heap(), len(calls))\n")],
        capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "True True 1", done.stderr
