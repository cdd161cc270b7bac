"""How clustermq reaches a Spark cluster's processes: a wheel, shipped or installed.

The wheel is built with ``python -m build`` as the README says. A fresh virtual environment
gets the package's dependencies but not the package; then

* ``spark-submit --py-files clustermq-*.whl`` to the standalone cluster, with the same wheel on
  the submitting side's ``PYTHONPATH``, runs a user's script that imports nothing of clustermq:
  the executors find the package in the shipped wheel, the driver's Python processes (the
  source lookup, the reader) on ``PYTHONPATH``. ``--py-files`` alone does not reach the Python
  processes Spark starts on the driver (measured: DATA_SOURCE_NOT_FOUND; with an explicit
  register call, PYTHON_DATA_SOURCE_ERROR: the worker creating the source could not load it);
* ``pip install`` of the same wheel into that environment lets the same script run as plain
  ``python``, again without a register call.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_standalone import StandaloneCluster, spark_bin, spark_env
from test_pipelines import loadgen_ids

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "drivers" / "drain_to_parquet.py"


def run(cmd: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert out.returncode == 0, f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build --wheel`` of this checkout."""
    dist = tmp_path_factory.mktemp("dist")
    src = tmp_path_factory.mktemp("src") / "clustermq"
    # build from a copy: the build writes build/ and *.egg-info next to the sources
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".cache", ".git", "build", "*.egg-info",
                                                             "__pycache__", "bench-results"))
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(src)], 600)
    (found,) = dist.glob("clustermq-*.whl")
    return found


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Iterator[Path]:
    """A new venv with clustermq's dependencies (from the wheel's metadata) but not clustermq."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    run([sys.executable, "-m", "venv", str(venv)], 120)
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", str(wheel)], 900)
    run([str(python), "-m", "pip", "uninstall", "-q", "-y", "clustermq"], 120)
    missing = subprocess.run([str(python), "-c", "import clustermq"], capture_output=True)
    assert missing.returncode != 0, "the fresh environment must not have clustermq yet"
    yield python
    shutil.rmtree(venv)  # 0.7 GB of the suite's disk: a nearly full CI disk has little to spare


def drain_env(broker: Any, python: Path) -> dict[str, str]:
    username, password = broker.cluster.credentials
    env = spark_env({"CLUSTERMQ_USERNAME": username, "CLUSTERMQ_PASSWORD": password,
                     "PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python)})
    env.pop("PYTHONPATH", None)  # nothing of this checkout on the path
    env.pop("SPARK_HOME", None)
    return env


def last_json(stdout: str) -> dict[str, Any]:
    return json.loads(stdout.strip().splitlines()[-1])


def test_a_wheel_shipped_with_py_files_reaches_driver_and_executors(
    spark: SparkSession, broker: Any, standalone: StandaloneCluster, fresh_env: Path, wheel: Path, tmp_path: Path
) -> None:
    queue, total = f"test.pyfiles.{uuid.uuid4().hex[:8]}", 1500
    broker.produce(queue, total)
    env = drain_env(broker, fresh_env)
    env["SPARK_HOME"] = str(Path(spark_bin("spark-submit")).parents[1])
    env["PYTHONPATH"] = str(wheel)  # the driver side: where the job is submitted from
    out = run([spark_bin("spark-submit"), "--master", standalone.master_url,
               "--conf", "spark.executor.memory=1g", "--py-files", str(wheel), str(DRIVER),
               "--brokers", broker.cluster.brokers, "--queue", queue, "--out", str(tmp_path / "out"),
               "--checkpoint", str(tmp_path / "checkpoint")], 420, env=env, cwd=tmp_path)
    result = last_json(out.stdout)
    assert result["rows"] == total
    assert sorted(loadgen_ids(spark.read.parquet(str(tmp_path / "out")))) == list(range(total))
    assert result["app_id"].startswith("app-"), result  # a standalone application, not local
    assert any(a["id"] == result["app_id"] for a in standalone.applications())
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_an_installed_wheel_gives_format_clustermq_without_a_register_call(
    spark: SparkSession, broker: Any, fresh_env: Path, wheel: Path, tmp_path: Path
) -> None:
    run([str(fresh_env), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], 300)
    queue, total = f"test.wheel.{uuid.uuid4().hex[:8]}", 500
    broker.produce(queue, total)
    env = drain_env(broker, fresh_env)
    out = run([str(fresh_env), str(DRIVER), "--brokers", broker.cluster.brokers, "--queue", queue,
               "--out", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "checkpoint")],
              300, env=env, cwd=tmp_path)
    assert last_json(out.stdout)["rows"] == total
    assert sorted(loadgen_ids(spark.read.parquet(str(tmp_path / "out")))) == list(range(total))
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_a_job_run_as_plain_python_gets_delta_from_delta_spark(
    spark: SparkSession, broker: Any, fresh_env: Path, wheel: Path, tmp_path: Path
) -> None:
    """``pip install 'clustermq[delta]'``: a job started as plain ``python`` uses delta-spark's
    own helper (``spark.jars.packages``, resolved by Spark from Maven), not the offline cache
    (the fresh environment is no checkout, it has none)."""
    run([str(fresh_env), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], 300)
    run([str(fresh_env), "-m", "pip", "install", "-q", "delta-spark==4.4.0"], 600)
    queue, total = f"test.pipdelta.{uuid.uuid4().hex[:8]}", 500
    broker.produce(queue, total)
    env = drain_env(broker, fresh_env)
    ivy = ROOT / "conf" / "ivysettings.xml"  # see the README: Maven's half-filled ~/.m2
    env["PYSPARK_SUBMIT_ARGS"] = env["PYSPARK_SUBMIT_ARGS"].replace(
        "pyspark-shell", f"--conf spark.jars.ivySettings={ivy} pyspark-shell")
    table = tmp_path / "table"
    out = run([str(fresh_env), str(ROOT / "spark_jobs" / "queue_to_delta.py"),
               "--brokers", broker.cluster.brokers, "--queue", queue, "--table", str(table),
               "--checkpoint", str(tmp_path / "checkpoint"), "--trigger", "availableNow"],
              600, env=env, cwd=tmp_path)
    assert "done:" in out.stdout
    assert sorted(loadgen_ids(spark.read.format("delta").load(str(table)))) == list(range(total))
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}
