"""Stable hashing of group ids to Spark partitions (reader) and to broker nodes (writer).

Python's ``hash`` is salted per process, so it cannot place a group in the same partition
across restarts. CRC-32 of the UTF-8 bytes is stable everywhere, fast in C, and spreads
short ids evenly enough for bucketing.
"""

from __future__ import annotations

import zlib

from clustermq.errors import OptionError


def group_hash(group_id: str) -> int:
    """Unsigned 32-bit hash of a group id, identical in every process and release."""
    return zlib.crc32(group_id.encode("utf-8")) & 0xFFFFFFFF


def bucket_for_group(group_id: str, buckets: int) -> int:
    """The bucket (partition or node index) a group always lands in."""
    if buckets < 1:
        raise OptionError(f"option 'brokers': no node to put a group on (got {buckets} buckets)")
    return group_hash(group_id) % buckets


def bucket_for_ungrouped(sequence: int, node_index: int, buckets: int) -> int:
    """Messages without a group are spread evenly: consecutive messages of a node rotate."""
    return (sequence + node_index) % buckets
