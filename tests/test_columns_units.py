"""The reader's buffer-built Arrow columns: exactly what ``pa.array`` builds, without pandas."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from clustermq.read import columns

ALPHABET = "aZ09 ,:\\\n\u00e9\u4e2d\U0001f600"


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 12)))


@pytest.mark.parametrize("null_share", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("rows", [0, 1, 7, 8, 9, 1000])
def test_columns_equal_what_pa_array_builds(rows: int, null_share: float) -> None:
    rng = random.Random(rows * 10 + int(null_share * 10))

    def maybe(value: object) -> object:
        return None if rng.random() < null_share else value

    texts = [maybe(_text(rng)) for _ in range(rows)]
    blobs = [maybe(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 20)))) for _ in range(rows)]
    longs = [maybe(rng.randrange(-(2**62), 2**62)) for _ in range(rows)]
    ints = [maybe(rng.randrange(-(2**31), 2**31)) for _ in range(rows)]
    flags = [rng.random() < 0.5 for _ in range(rows)]
    maps = [{_text(rng): _text(rng) for _ in range(rng.randrange(0, 5))} for _ in range(rows)]
    stamp = pa.timestamp("us", tz="UTC")

    pairs = [
        (columns.string_column(texts), pa.array(texts, pa.string())),
        (columns.binary_column(blobs), pa.array(blobs, pa.binary())),
        (columns.int_column(longs, pa.int64()), pa.array(longs, pa.int64())),
        (columns.int_column(ints, pa.int32()), pa.array(ints, pa.int32())),
        (columns.int_column(longs, stamp), pa.array(longs, stamp)),
        (columns.bool_column(flags), pa.array(flags, pa.bool_())),
        (columns.repeated_string_column("node1", rows), pa.array(["node1"] * rows, pa.string())),
        (columns.string_map_column(maps),
         pa.array([list(m.items()) for m in maps], pa.map_(pa.string(), pa.string()))),
    ]
    for built, expected in pairs:
        built.validate(full=True)
        assert built.type == expected.type
        assert built.null_count == expected.null_count
        assert built.equals(expected), (built, expected)


def test_planning_a_batch_does_not_import_pandas() -> None:
    """pyarrow's ``pa.array`` imports pandas on first use (0.3-0.5 s, more under load), which
    held the first batch of every query up; the reader's planning must not trigger it."""
    script = textwrap.dedent("""
        import sys
        from clustermq.broker.dialect import DIALECTS
        from clustermq.read.messages import BufferedMessage
        from clustermq.read.schema import from_ipc, to_ipc, to_record_batch
        dialect = next(iter(DIALECTS.values()))
        rows = [BufferedMessage({"destination": "/queue/q", "message-id": str(i),
                                 "timestamp": "1700000000000", "priority": "4"},
                                b"x", str(i), 0, i, seq=i) for i in range(10)]
        batch, _ = to_record_batch("node0", rows, dialect, "clustermq_group")
        assert sum(b.num_rows for b in from_ipc(to_ipc([batch]))) == 10
        print("pandas" in sys.modules, "pyarrow.compute" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], out.stdout + out.stderr
