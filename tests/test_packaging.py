"""How clustermq reaches a Spark cluster's processes: a wheel, shipped or installed; and what
the installed package carries.

The wheel is built with ``python -m build`` as the README says. A fresh virtual environment,
outside the checkout, gets the package's dependencies (at the versions of
``conf/constraints.txt``, which CI tests) but not the package; then

* ``spark-submit --py-files clustermq-*.whl`` to the standalone cluster, with the same wheel on
  the submitting side's ``PYTHONPATH``, runs a user's script that imports nothing of clustermq:
  the executors find the package in the shipped wheel, the driver's Python processes (the
  source lookup, the reader) on ``PYTHONPATH``. ``--py-files`` alone does not reach the Python
  processes Spark starts on the driver (measured: DATA_SOURCE_NOT_FOUND; with an explicit
  register call, PYTHON_DATA_SOURCE_ERROR: the worker creating the source could not load it);
* ``pip install`` of the same wheel into that environment lets the same script run as plain
  ``python``, again without a register call;
* the installed package is whole: ``clustermq cluster up`` renders the broker templates from its
  package data, the jobs run as ``python -m clustermq.jobs.<job>``, and the Delta jar-cache
  command reads its pom from package data. Fetching is not what is tested here (it downloads):
  ``CLUSTERMQ_CACHE`` points the installed package at this checkout's cache, as it would point
  several installs at one shared cache.

The tests that need no fresh environment (pins against ranges, the missing-distribution error)
have no marker and run with ``make unit``; the others cost a wheel build and a venv with pyspark
and are marked like the tests that use the broker and Spark fixtures.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from pyspark.sql import SparkSession

from clustermq.devtools.localcluster import LocalCluster
from clustermq.devtools.localcluster.fetch import distribution_home
from clustermq.errors import ClusterMQError, NotInstalled
from clustermq.paths import cache_dir
from clustermq.pipelines.delta_jars import delta_jars, pinned_artifact
from clustermq.version import __version__
from conftest import cluster_flavors
from spark_standalone import StandaloneCluster, spark_bin, spark_env
from test_pipelines import loadgen_ids

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "drivers" / "drain_to_parquet.py"
CONSTRAINTS = ROOT / "conf" / "constraints.txt"
PACKAGE = ROOT / "connector" / "clustermq"
JOBS = ("queue_to_delta", "export_backlog", "publish_table", "queue_to_parquet")


def pyproject_toml() -> dict[str, Any]:
    import tomllib  # Python 3.11+, as is this suite's interpreter; the package itself supports 3.10

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pyproject() -> dict[str, Any]:
    return pyproject_toml()["project"]


def requirements() -> list[Requirement]:
    """Every requirement pyproject states: the dependencies and every extra's."""
    project = pyproject()
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines += extra
    return [Requirement(line) for line in lines]


def constraints() -> dict[str, str]:
    """name -> pinned version of conf/constraints.txt."""
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{CONSTRAINTS}: {line!r} is not an exact pin (name==version)"
            pins[name.strip().lower()] = version.strip()
    return pins


def test_dependencies_are_ranges_and_ci_pins_lie_inside_them() -> None:
    """A library pinned to one patch release fights the user's Spark: pyproject states ranges,
    conf/constraints.txt the exact versions CI runs, and each pin satisfies every range."""
    project = pyproject()
    names = {Requirement(line).name.lower() for line in project["dependencies"]}
    assert names == {"pyspark", "pyarrow", "stomp.py"}, "py4j comes with pyspark; qpid is the amqp extra"
    pins = constraints()
    for requirement in requirements():
        assert not any(s.operator == "==" for s in requirement.specifier) or requirement.name in (
            "ruff", "mypy"), f"{requirement}: a range, not a pin (pins go to {CONSTRAINTS.name})"
        pinned = pins.get(requirement.name.lower())
        if pinned is not None:
            assert requirement.specifier.contains(pinned, prereleases=True), f"{requirement} excludes the CI pin {pinned}"
    for name in ("pyspark", "py4j", "stomp.py", "python-qpid-proton", "delta-spark"):
        assert name in pins, f"{CONSTRAINTS.name} pins no {name}"
    assert project["optional-dependencies"]["amqp"][0].startswith("python-qpid-proton")


def test_the_delta_pom_release_is_the_delta_extra_and_the_ci_pin() -> None:
    """The offline jar cache (delta_pom.xml) and delta-spark's pip helper fetch the same Delta."""
    _, version = pinned_artifact()
    (delta,) = [Requirement(line) for line in pyproject()["optional-dependencies"]["delta"]]
    assert delta.name == "delta-spark" and delta.specifier.contains(version)
    assert constraints()["delta-spark"] == version


def test_one_version_source() -> None:
    project = pyproject()
    assert "version" not in project and project["dynamic"] == ["version"]
    setuptools = pyproject_toml()["tool"]["setuptools"]
    assert setuptools["dynamic"]["version"] == {"attr": "clustermq.version.__version__"}
    import clustermq

    assert clustermq.__version__ == __version__
    assert not re.search(r"^__version__ = ", (PACKAGE / "__init__.py").read_text(), re.MULTILINE)


def test_a_missing_broker_distribution_names_the_command_that_fetches_it(tmp_path: Path) -> None:
    with pytest.raises(NotInstalled, match=r"`clustermq cluster fetch --flavor artemis`") as err:
        distribution_home("artemis", cache=tmp_path)
    assert isinstance(err.value, ClusterMQError) and isinstance(err.value, FileNotFoundError)
    assert str(tmp_path) in str(err.value)


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
    """A new venv with clustermq's dependencies (from the wheel's metadata, at the versions CI
    pins) but not clustermq."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    run([sys.executable, "-m", "venv", str(venv)], 120)
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS), str(wheel)], 900)
    uninstall(python)
    yield python
    shutil.rmtree(venv)  # 0.7 GB of the suite's disk: a nearly full CI disk has little to spare


def uninstall(python: Path) -> None:
    run([str(python), "-m", "pip", "uninstall", "-q", "-y", "clustermq"], 120)
    missing = subprocess.run([str(python), "-c", "import clustermq"], capture_output=True)
    assert missing.returncode != 0, "the fresh environment must not have clustermq now"


@pytest.fixture
def installed(fresh_env: Path, wheel: Path) -> Path:
    """The fresh venv with the wheel pip-installed (a no-op when it already is)."""
    run([str(fresh_env), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], 300)
    return fresh_env


def installed_env(home: Path) -> dict[str, str]:
    """The environment of a command run from the installed package: nothing of this checkout on
    the path, and this checkout's cache (the brokers and jars ``make setup`` fetched)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env["CLUSTERMQ_CACHE"] = str(cache_dir())
    env["HOME"] = str(home)  # nothing of the user's ~/.cache either
    return env


def drain_env(broker: Any, python: Path) -> dict[str, str]:
    username, password = broker.cluster.credentials
    env = spark_env({"CLUSTERMQ_USERNAME": username, "CLUSTERMQ_PASSWORD": password,
                     "PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python)})
    env.pop("PYTHONPATH", None)  # nothing of this checkout on the path
    env.pop("SPARK_HOME", None)
    return env


def last_json(stdout: str) -> dict[str, Any]:
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.mark.one_flavor  # how the package reaches Spark's processes, for any broker
def test_a_wheel_shipped_with_py_files_reaches_driver_and_executors(
    spark: SparkSession, broker: Any, standalone: StandaloneCluster, fresh_env: Path, wheel: Path, tmp_path: Path
) -> None:
    uninstall(fresh_env)  # the package must reach the processes from the shipped wheel only
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


@pytest.mark.one_flavor  # how the package reaches Spark's processes, for any broker
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


@pytest.mark.one_flavor  # how the package reaches Spark's processes, for any broker
def test_a_job_run_as_plain_python_gets_delta_from_delta_spark(
    spark: SparkSession, broker: Any, fresh_env: Path, wheel: Path, tmp_path: Path
) -> None:
    """``pip install 'clustermq[delta]'`` (at CI's pin): a job started as plain ``python`` uses
    delta-spark's own helper (``spark.jars.packages``, resolved by Spark from Maven), not the offline cache
    (the fresh environment is no checkout, it has none)."""
    run([str(fresh_env), "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS), f"{wheel}[delta]"], 600)
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


@pytest.mark.cluster
@pytest.mark.spark
def test_the_wheel_carries_the_templates_the_pom_and_the_license(wheel: Path) -> None:
    templates = PACKAGE / "devtools" / "localcluster" / "templates"
    expected = {f"clustermq/{p.relative_to(PACKAGE).as_posix()}" for p in templates.rglob("*.tmpl")}
    expected |= {"clustermq/pipelines/delta_pom.xml", f"clustermq-{__version__}.dist-info/licenses/LICENSE"}
    assert len(expected) > 10
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"clustermq-{__version__}.dist-info/METADATA").decode()
    assert expected <= names, sorted(expected - names)
    assert wheel.name.startswith(f"clustermq-{__version__}-")
    assert "License-Expression: Apache-2.0" in metadata
    assert not re.search(r"^Requires-Dist: (py4j|python-qpid-proton)(?!.*extra ==)", metadata, re.MULTILINE)


@pytest.mark.cluster
@pytest.mark.spark
@pytest.mark.parametrize("flavor", cluster_flavors())
def test_the_installed_package_runs_a_local_cluster(installed: Path, flavor: str, tmp_path: Path) -> None:
    """``clustermq cluster fetch``, ``up`` and ``down`` from the wheel, outside the checkout: the
    templates come from package data, the distribution from the cache (which ``fetch`` finds
    complete, so it downloads nothing)."""
    clustermq, work, cluster_dir = installed.parent / "clustermq", tmp_path / "cwd", tmp_path / "cluster"
    work.mkdir()
    env = installed_env(tmp_path)
    fetched = run([str(clustermq), "cluster", "fetch", "--flavor", flavor], 120, env=env, cwd=work)
    assert fetched.stdout.strip() == str(distribution_home(flavor))
    try:
        out = run([str(clustermq), "cluster", "up", "--nodes", "1", "--flavor", flavor, "--dir", str(cluster_dir)],
                  300, env=env, cwd=work)
        brokers = out.stdout.strip().splitlines()[-1]
        cluster = LocalCluster(cluster_dir)
        assert brokers == cluster.brokers and len(cluster.nodes()) == 1
        assert all(row["ready"] for row in cluster.status())
        run([str(clustermq), "cluster", "down", "--dir", str(cluster_dir)], 120, env=env, cwd=work)
        assert not any(row["running"] for row in cluster.status())
    finally:
        LocalCluster(cluster_dir).down()  # by the pids in cluster.json; a no-op after a clean down


@pytest.mark.cluster
@pytest.mark.spark
def test_the_installed_jobs_run_as_modules(installed: Path, tmp_path: Path) -> None:
    """``python -m clustermq.jobs.<job> --help`` from the wheel, the jobs started in parallel."""
    env = installed_env(tmp_path)
    procs = {job: subprocess.Popen([str(installed), "-m", f"clustermq.jobs.{job}", "--help"], env=env,
                                   cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for job in JOBS}
    try:
        for job, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=120)
            assert proc.returncode == 0, f"{job}: exit {proc.returncode}\n{stderr[-3000:]}"
            assert stdout.startswith("usage:") and "--brokers" in stdout, f"{job}: {stdout[:500]}"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.cluster
@pytest.mark.spark
def test_the_installed_jar_cache_command(installed: Path, tmp_path: Path) -> None:
    """``python -m clustermq.pipelines.delta_jars --jars`` from the wheel finds the cached jars
    (the pom is package data); outside a checkout the default cache is ~/.cache/clustermq."""
    env = installed_env(tmp_path)
    out = run([str(installed), "-m", "clustermq.pipelines.delta_jars", "--jars"], 120, env=env, cwd=tmp_path)
    assert out.stdout.strip() == ",".join(str(j) for j in delta_jars())
    del env["CLUSTERMQ_CACHE"]
    where = run([str(installed), "-c", "from clustermq.paths import cache_dir; print(cache_dir())"], 60,
                env=env, cwd=tmp_path)
    assert where.stdout.strip() == str(tmp_path / ".cache" / "clustermq")
