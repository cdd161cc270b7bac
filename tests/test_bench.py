"""A smoke run of the benchmark script, so that ``make bench`` cannot rot.

It runs the raw-client baselines and the reader on a few hundred messages against the session's
cluster and Spark; the figures are meaningless at this size, the outputs are what is checked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from clustermq.devtools.bench.run import main

# The script is flavor-agnostic (it starts its own cluster under `make bench`); one flavor suffices.
pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.flavors("classic")]


def test_bench_smoke_run_writes_json_table_and_plots(spark: SparkSession, broker, tmp_path: Path) -> None:
    out, doc = tmp_path / "out", tmp_path / "benchmarks.md"
    assert main(["--scale", "0.0015", "--steps", "write,read", "--no-delta",
                 "--out", str(out), "--doc", str(doc)], cluster=broker.cluster, spark=spark) == 0
    results = json.loads((out / "results.json").read_text())
    by_name = {row["name"]: row for row in results["comparisons"]}
    assert set(by_name) == {"write: raw stomp.py producers", "read: raw stomp.py consumers",
                            "write: clustermq writer", "read: clustermq reader -> noop"}
    for row in by_name.values():  # every message was read, or the stall is reported
        assert row["messages"] + row.get("stalled_with_left", 0) == 300
        assert row["messages_per_s"] > 0 and row["ratio_to_raw"] > 0
    assert by_name["read: raw stomp.py consumers"]["ratio_to_raw"] == 1.0
    table = doc.read_text()
    assert "| read: clustermq reader -> noop |" in table
    for image in ("bench-throughput-per-node.png",):
        assert (out / image).stat().st_size > 1000 and f"]({image})" in table
        assert (tmp_path / image).exists()
