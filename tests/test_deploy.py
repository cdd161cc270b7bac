"""The ready-made jobs as Spark applications: ``spark-submit`` to a standalone cluster.

A standalone master and worker are started from pyspark's own ``spark-class`` (free ports,
stopped by pid); each job is submitted with the command the README's "Running on a cluster"
gives, and the test asserts what a user would check: exit code 0, the application registered
at the master (its JSON status), every message exactly once in the table, the queue empty.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from clustermq.pipelines.delta_session import DELTA_MAVEN_PACKAGE
from spark_standalone import StandaloneCluster, spark_bin, spark_env
from test_pipelines import loadgen_ids, tail
from test_reader_faults import kill_group

# How a job is deployed does not depend on the broker it reads: one flavor proves it.
pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.one_flavor]

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "spark_jobs"


def offline_jars() -> str:
    """``python -m clustermq.pipelines.delta_jars --jars``: the README's offline route."""
    out = subprocess.run([sys.executable, "-m", "clustermq.pipelines.delta_jars", "--jars"],
                         capture_output=True, text=True, timeout=300, check=True)
    return out.stdout.strip()


def submit(cluster: StandaloneCluster, delta: list[str], job: str, args: list[str], broker: Any,
           log: Path, timeout: float = 420) -> int:
    """``spark-submit --master spark://... <delta route> spark_jobs/<job> <args>``."""
    username, password = broker.cluster.credentials
    env = spark_env({"CLUSTERMQ_USERNAME": username, "CLUSTERMQ_PASSWORD": password,
                     "PYTHONUNBUFFERED": "1"})
    cmd = [spark_bin("spark-submit"), "--master", cluster.master_url,
           "--conf", "spark.executor.memory=1g", *delta, str(JOBS / job), *args]
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise AssertionError(f"{job} did not finish in {timeout:.0f} s:\n{tail(log)}") from None


def ran_on(cluster: StandaloneCluster, name: str, before: set[str]) -> dict[str, Any]:
    """The one application named ``name`` the master saw since ``before`` (app ids)."""
    apps = [a for a in cluster.applications() if a["name"] == name and a["id"] not in before]
    assert len(apps) == 1, cluster.applications()
    return apps[0]


def app_ids(cluster: StandaloneCluster) -> set[str]:
    return {a["id"] for a in cluster.applications()}


def test_queue_to_delta_submitted_with_packages_reads_every_message_once(
    spark: SparkSession, broker: Any, standalone: StandaloneCluster, tmp_path: Path
) -> None:
    queue, total = f"test.submit.q2d.{uuid.uuid4().hex[:8]}", 3000
    broker.produce(queue, total)
    table, log = tmp_path / "table", tmp_path / "submit.log"
    before = app_ids(standalone)
    code = submit(standalone, ["--conf", f"spark.jars.ivySettings={ROOT / 'conf' / 'ivysettings.xml'}",
                               "--packages", DELTA_MAVEN_PACKAGE], "queue_to_delta.py",
                  ["--brokers", broker.cluster.brokers, "--queue", queue, "--table", str(table),
                   "--checkpoint", str(tmp_path / "checkpoint"), "--trigger", "availableNow",
                   "--dedupe", "all", "--id-header", "loadgen_id"], broker, log)
    assert code == 0, tail(log)
    app = ran_on(standalone, "clustermq-queue-to-delta", before)
    assert app["state"] == "FINISHED", app
    rows = spark.read.format("delta").load(str(table))
    assert sorted(loadgen_ids(rows)) == list(range(total))
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_export_backlog_and_publish_table_submitted_with_offline_jars(
    spark: SparkSession, broker: Any, standalone: StandaloneCluster, tmp_path: Path
) -> None:
    source, target = (f"test.submit.{k}.{uuid.uuid4().hex[:8]}" for k in ("exp", "pub"))
    total_n = 600
    broker.produce(source, total_n)
    jars = ["--jars", offline_jars()]
    table = tmp_path / "export"
    before = app_ids(standalone)
    code = submit(standalone, jars, "export_backlog.py",
                  ["--brokers", broker.cluster.brokers, "--queue", source, "--mode", "drain",
                   "--format", "delta", "--out", str(table),
                   "--checkpoint", str(tmp_path / "checkpoint")], broker, tmp_path / "export.log")
    assert code == 0, tail(tmp_path / "export.log")
    assert ran_on(standalone, "clustermq-export-backlog", before)["state"] == "FINISHED"
    exported = spark.read.format("delta").load(str(table))
    assert sorted(loadgen_ids(exported)) == list(range(total_n))
    assert broker.wait_depth_zero(source) == {n.name: 0 for n in broker.cluster.nodes()}

    before = app_ids(standalone)
    code = submit(standalone, jars, "publish_table.py",
                  ["--brokers", broker.cluster.brokers, "--queue", target, "--input", str(table),
                   "--format", "delta", "--body-col", "body"], broker, tmp_path / "publish.log")
    assert code == 0, tail(tmp_path / "publish.log")
    assert ran_on(standalone, "clustermq-publish-table", before)["state"] == "FINISHED"
    assert sum(d or 0 for d in broker.settled_depths(target).values()) == total_n


def test_a_job_without_delta_on_the_class_path_fails_at_once_naming_the_routes(
    broker: Any, standalone: StandaloneCluster, tmp_path: Path
) -> None:
    queue = f"test.submit.nodelta.{uuid.uuid4().hex[:8]}"
    broker.produce(queue, 10)
    log = tmp_path / "submit.log"
    code = submit(standalone, [], "queue_to_delta.py",
                  ["--brokers", broker.cluster.brokers, "--queue", queue,
                   "--table", str(tmp_path / "table"), "--checkpoint", str(tmp_path / "cp"),
                   "--trigger", "availableNow"], broker, log, timeout=180)
    text = log.read_text(errors="replace")
    assert code == 2, tail(log)
    assert f"--packages {DELTA_MAVEN_PACKAGE}" in text and "delta_jars --jars" in text, tail(log)
    assert "clustermq[delta]" in text
    # nothing was read: the queue still holds every message
    assert sum(d or 0 for d in broker.settled_depths(queue).values()) == 10
