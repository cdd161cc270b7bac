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
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- bench:headline -->\nold\n<!-- /bench:headline -->\nrest\n")
    assert main(["--scale", "0.0015", "--steps", "write,read,floor", "--no-delta", "--repeats", "2",
                 "--out", str(out), "--doc", str(doc), "--readme", str(readme)],
                cluster=broker.cluster, spark=spark) == 0
    results = json.loads((out / "results.json").read_text())
    by_name = {row["name"]: row for row in results["comparisons"]}
    assert set(by_name) == {"write: raw stomp.py producers", "read: raw stomp.py consumers",
                            "write: clustermq writer", "read: clustermq reader -> noop",
                            "read: Python source, no broker -> noop"}
    for row in by_name.values():  # every message was read, or the stall is reported
        assert row["messages"] + row.get("stalled_with_left", 0) == 300
        assert row["messages_per_s"] > 0 and row["ratio_to_raw"] > 0
        # alternating runs: the ratio is their median, within their min and max
        assert len(row["runs"]) == 2 and row["ratio_min"] <= row["ratio_to_raw"] <= row["ratio_max"]
        assert row["cpu_us_per_msg"]["driver"] >= 0
    reader = by_name["read: clustermq reader -> noop"]
    assert reader["cpu_us_per_msg"]["reader"] > 0  # the streaming-source process was found
    assert reader["depth_rise_max"] >= 0 and reader["first_batch_s"] > 0
    floor = by_name["read: Python source, no broker -> noop"]  # its own source process, measured
    assert floor["cpu_us_per_msg"]["reader"] > 0 and floor["first_batch_s"] > 0
    assert by_name["read: raw stomp.py consumers"]["ratio_to_raw"] == 1.0
    table = doc.read_text()
    assert "| read: clustermq reader -> noop |" in table
    headline = readme.read_text()
    assert "old" not in headline and "reader -> noop" in headline and headline.endswith("rest\n")
    for image in ("bench-throughput-per-node.png", "bench-depth-per-node.png"):
        assert (out / image).stat().st_size > 1000 and f"]({image})" in table
        assert (tmp_path / image).exists()
