"""Spark Connect: a client session (``SparkSession.builder.remote``) uses the source and the
sink, streaming and batch, against a server started from the jar pyspark ships."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_connect_server import ConnectServer, connect_server
from spark_standalone import spark_env

# Spark Connect runs the same source and sink code for every broker: one flavor proves it.
pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.one_flavor]

CLIENT = Path(__file__).resolve().parent / "drivers" / "connect_client.py"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with connect_server(tmp_path_factory.mktemp("connect")) as running:
        yield running


def test_a_connect_client_reads_and_writes_streaming_and_batch(
    broker: Any, server: ConnectServer, tmp_path: Path
) -> None:
    rows = 400
    queue_a, queue_b = (f"test.connect.{k}.{uuid.uuid4().hex[:8]}" for k in "ab")
    username, password = broker.cluster.credentials
    env = spark_env({"CLUSTERMQ_USERNAME": username, "CLUSTERMQ_PASSWORD": password})
    browse = broker.flavor == "classic"  # Artemis cannot browse over STOMP (README, batch read)
    cmd = [sys.executable, str(CLIENT), "--remote", server.url, "--brokers", broker.cluster.brokers,
           "--queue-a", queue_a, "--queue-b", queue_b, "--work", str(tmp_path), "--rows", str(rows)]
    out = subprocess.run(cmd + (["--browse"] if browse else []), env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-5000:]}\nserver:\n{server.log_tail()}"
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["client"].startswith("pyspark.sql.connect"), result["client"]
    assert result["read_a"] == list(range(rows))
    assert result["stream_write_error"] is None
    latest = json.loads(result["latest_offset"])
    assert sorted(latest) == sorted(n.name for n in broker.cluster.nodes())
    assert broker.wait_depth_zero(queue_a) == {n.name: 0 for n in broker.cluster.nodes()}
    assert sum(d or 0 for d in broker.settled_depths(queue_b).values()) == rows
    if browse:
        assert result["browse_b"] == list(range(rows))
