"""Probe of the Spark behaviour the consumption model rests on (docs/design.md, "The consumption model").

Acknowledge-on-commit acknowledges in ``latestOffset(start)``; that is only safe if Spark calls
``latestOffset(start, limit)`` after the commit log holds the batch that ended at ``start``.
This probe source records, at every ``latestOffset`` call, whether that commit file exists.
No broker is involved: this tests Spark, with a throw-away in-memory source.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

TOTAL = 25


class _ProbeReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict) -> None:
        self.log = options["log"]
        self.checkpoint = options["checkpoint"]

    def _write(self, event: dict) -> None:
        with open(self.log, "a") as fh:
            fh.write(json.dumps(event) + "\n")

    def initialOffset(self) -> dict:
        return {"n": 0}

    def getDefaultReadLimit(self):
        return ReadMaxRows(10)

    def prepareForTriggerAvailableNow(self) -> None:
        self._write({"call": "prepare"})

    def latestOffset(self, start: dict, limit) -> dict:
        commits = sorted(int(p) for p in os.listdir(os.path.join(self.checkpoint, "commits"))
                         if p.isdigit()) if os.path.isdir(os.path.join(self.checkpoint, "commits")) else []
        end = {"n": min(TOTAL, start["n"] + limit.max_rows)}
        self._write({"call": "latest", "start": start["n"], "end": end["n"], "commits": commits})
        return end

    def partitions(self, start: dict, end: dict):
        self._write({"call": "partitions", "start": start["n"], "end": end["n"]})
        return [InputPartition((start["n"], end["n"]))]

    def read(self, partition):
        lo, hi = partition.value
        for i in range(lo, hi):
            yield (i,)

    def commit(self, end: dict) -> None:
        self._write({"call": "commit", "end": end["n"]})


class _ProbeSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "callorderprobe"

    def schema(self) -> str:
        return "i int"

    def streamReader(self, schema):
        return _ProbeReader(self.options)


@pytest.mark.spark
def test_latest_offset_is_called_only_after_the_previous_batch_committed(spark, tmp_path: Path) -> None:
    spark.dataSource.register(_ProbeSource)
    log = tmp_path / "calls.jsonl"
    checkpoint = tmp_path / "ckpt"
    query = (
        spark.readStream.format("callorderprobe")
        .option("log", str(log)).option("checkpoint", str(checkpoint)).load()
        .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    events = [json.loads(line) for line in log.read_text().splitlines()]
    batches = [(e["start"], e["end"]) for e in events if e["call"] == "partitions"]
    assert batches == [(0, 10), (10, 20), (20, 25)]
    ends_to_batch = {end: i for i, (_, end) in enumerate(batches)}
    latest = [e for e in events if e["call"] == "latest"]
    # every batch's end offset is later passed as a start, and by then its commit is logged
    for end, batch_id in ends_to_batch.items():
        calls = [e for e in latest if e["start"] == end]
        assert calls, f"latestOffset never called with start={end}"
        assert all(batch_id in e["commits"] for e in calls), calls
    # the final call (returns start: AvailableNow ends) comes after the last commit
    assert latest[-1]["start"] == latest[-1]["end"] == TOTAL
    assert 2 in latest[-1]["commits"]
