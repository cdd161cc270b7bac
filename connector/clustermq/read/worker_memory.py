"""Keep the source worker's per-batch blocks out of the heap, so its memory stays flat.

The reader's process hands Spark every batch as partitions of Arrow IPC bytes, 1-3 MB each at
the default batch sizes, copied once more when Spark pickles them. glibc serves such a block with
a mapping of its own, but the first time it frees one it raises its mmap threshold to that
block's size (its "dynamic threshold", up to 32 MiB). From then on every batch's blocks come
from the heap, between the small objects of the messages the reader buffers, and the heap keeps
the holes they leave: over a 1,000,000-message drain the process's RSS crept from about 180 to
over 200 MiB while the Python objects it held stayed flat (docs/design.md, "Reader memory").

A threshold set with ``mallopt`` is fixed (glibc then never moves it), so a block of
``MMAP_THRESHOLD_BYTES`` or more is mapped on allocation and unmapped on free. The cost is a
mapping and its page faults per block: a few per batch.

Only in Spark's worker for a Python streaming source: a driver or a test process keeps its
allocator as it is. Where the C library has no ``mallopt`` (not glibc) nothing changes.
"""

from __future__ import annotations

import ctypes
import functools

from clustermq.read.worker_exit import in_source_runner

#: glibc's ``M_MMAP_THRESHOLD`` parameter (malloc.h)
M_MMAP_THRESHOLD = -3
#: blocks this large or larger get a mapping of their own: a batch's partitions (1-3 MB) are
#: above it, a buffered message's objects (a few hundred bytes each) far below
MMAP_THRESHOLD_BYTES = 1024 * 1024


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix the C allocator's mmap threshold at ``threshold`` bytes; whether it was set."""
    try:
        # the process's own symbols, libc's among them (no ``find_library``: it runs ldconfig)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))


@functools.cache
def keep_batches_out_of_the_heap() -> bool:
    """In a source runner, fix the mmap threshold (see the module docstring); whether this
    process's threshold is fixed. Cached: a process's role never changes, and two readers racing
    on the first call would only set the same value twice."""
    return in_source_runner() and fix_mmap_threshold()
