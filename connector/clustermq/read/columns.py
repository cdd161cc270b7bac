"""Arrow columns built from their buffers, for the reader's planning.

``pa.array`` on Python lists imports pandas on its first call in a process where pandas is
installed (pyarrow checks for pandas-like input), 0.3-0.5 s, and seconds in the reader's process
while the first deliveries flood in: sampled with py-spy, batch 0's planning waited 0.66-0.75 s
on that import. Building each column from its buffers (the standard library's ``array`` for the
fixed-width parts and the offsets, one ``bytes.join`` for the variable-width ones) needs neither
pandas nor ``pyarrow.compute``, nor numpy, which pyarrow does not require.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from itertools import accumulate
from typing import cast

import pyarrow as pa

# Arrow's int32 offsets and int32 columns are the C int of every platform Spark runs on.
assert array("i").itemsize == 4 and array("q").itemsize == 8


def _bits(flags: Sequence[bool]) -> bytes:
    """Arrow's bitmap: bit ``i % 8`` of byte ``i // 8`` set for each true flag."""
    packed = bytearray((len(flags) + 7) // 8)
    for i, flag in enumerate(flags):
        if flag:
            packed[i >> 3] |= 1 << (i & 7)
    return bytes(packed)


def _validity(present: Sequence[bool], nulls: int) -> pa.Buffer | None:
    return pa.py_buffer(_bits(present)) if nulls else None


def _offsets(lengths: Iterable[int]) -> array[int]:
    return array("i", accumulate(lengths, initial=0))


def _variable(kind: pa.DataType, count: int, nulls: int, present: Sequence[bool],
              lengths: Iterable[int], data: bytes) -> pa.Array:
    return pa.Array.from_buffers(
        kind, count,
        [_validity(present, nulls), pa.py_buffer(_offsets(lengths)), pa.py_buffer(data)],
        null_count=nulls,
    )


def binary_column(values: Sequence[bytes | None]) -> pa.Array:
    """A ``binary`` column; ``None`` is null."""
    present = [v is not None for v in values]
    nulls = len(values) - sum(present)
    parts = [v if v is not None else b"" for v in values] if nulls else cast("Sequence[bytes]", values)
    return _variable(pa.binary(), len(values), nulls, present, map(len, parts), b"".join(parts))


def string_column(values: Sequence[str | None]) -> pa.Array:
    """A ``string`` column; ``None`` is null. Header text is mostly ASCII: then one ``encode``
    of the joined text does, and the character counts are the byte counts."""
    present = [v is not None for v in values]
    nulls = len(values) - sum(present)
    parts = [v if v is not None else "" for v in values] if nulls else cast("Sequence[str]", values)
    text = "".join(parts)
    if text.isascii():
        return _variable(pa.string(), len(parts), nulls, present, map(len, parts), text.encode())
    encoded = [part.encode() for part in parts]
    return _variable(pa.string(), len(parts), nulls, present, map(len, encoded), b"".join(encoded))


def int_column(values: Sequence[int | None], kind: pa.DataType) -> pa.Array:
    """An ``int32``/``int64``/``timestamp`` column; ``None`` is null."""
    present = [v is not None for v in values]
    nulls = len(values) - sum(present)
    data = array("i" if kind == pa.int32() else "q", [v if v is not None else 0 for v in values])
    return pa.Array.from_buffers(kind, len(values), [_validity(present, nulls), pa.py_buffer(data)],
                                 null_count=nulls)


def bool_column(values: Sequence[bool]) -> pa.Array:
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(_bits(values))],
                                 null_count=0)


def repeated_string_column(value: str, count: int) -> pa.Array:
    return string_column([value] * count)


def string_map_column(maps: Sequence[dict[str, str]]) -> pa.MapArray:
    """A ``map<string,string>`` column, one map per row, keys in the dict's order."""
    keys: list[str] = []
    values: list[str] = []
    for m in maps:
        keys.extend(m.keys())
        values.extend(m.values())
    offsets = pa.Array.from_buffers(pa.int32(), len(maps) + 1, [None, pa.py_buffer(_offsets(map(len, maps)))],
                                    null_count=0)
    return pa.MapArray.from_arrays(offsets, string_column(keys), string_column(values))
