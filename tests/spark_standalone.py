"""A Spark standalone cluster for the tests: one master and one worker from pyspark's own
``spark-class``, on free loopback ports, stopped by pid.

This is the cluster a user's ``spark-submit --master spark://...`` reaches; the tests submit the
ready-made jobs to it and read the master's JSON status to see that the application ran there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from clustermq.devtools.localcluster.ports import free_ports

SPARK_HOME = Path(pyspark.__file__).resolve().parent
HOST = "127.0.0.1"


def spark_bin(name: str) -> str:
    return str(SPARK_HOME / "bin" / name)


@dataclass
class StandaloneCluster:
    master_url: str
    ui_url: str
    work_dir: Path
    logs: list[Path]

    def status(self) -> dict[str, Any]:
        """The master's JSON status: workers, active and completed applications."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=10) as reply:
            return json.loads(reply.read().decode())

    def applications(self) -> list[dict[str, Any]]:
        status = self.status()
        return list(status.get("activeapps", [])) + list(status.get("completedapps", []))

    def log_tail(self, lines: int = 40) -> str:
        out = []
        for path in self.logs:
            text = path.read_text(errors="replace").splitlines() if path.exists() else []
            out.append(f"--- {path.name}\n" + "\n".join(text[-lines:]))
        return "\n".join(out)


def spark_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every Spark process of a test gets: this venv's Python on both sides."""
    env = dict(os.environ)
    env.update({
        "SPARK_HOME": str(SPARK_HOME),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": HOST,
    })
    env.update(extra or {})
    return env


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group (spark-class execs java in it), SIGKILL after a grace."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


def _wait(condition: Any, timeout: float, what: str, cluster_logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        # not up yet: the port refuses, or the master's status page answers an empty body
        # while it starts (json's ValueError)
        except (OSError, ValueError):
            pass
        time.sleep(0.3)
    tails = "\n".join(p.read_text(errors="replace")[-3000:] for p in cluster_logs if p.exists())
    raise AssertionError(f"{what} within {timeout:.0f} s\n{tails}")


@contextmanager
def standalone_cluster(work: Path, cores: int = 2, memory: str = "2g") -> Iterator[StandaloneCluster]:
    """Start a master and a worker; yield when the worker has registered; stop both by pid."""
    work.mkdir(parents=True, exist_ok=True)
    master_port, master_ui, worker_port, worker_ui = free_ports(4)
    master_url = f"spark://{HOST}:{master_port}"
    cluster = StandaloneCluster(master_url, f"http://{HOST}:{master_ui}", work / "worker",
                                [work / "master.log", work / "worker.log"])
    env = spark_env({"SPARK_WORKER_DIR": str(work / "worker")})
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(cluster.logs[0], "wb") as log:
            procs.append(subprocess.Popen(
                [spark_bin("spark-class"), "org.apache.spark.deploy.master.Master",
                 "--host", HOST, "--port", str(master_port), "--webui-port", str(master_ui)],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        _wait(lambda: "ALIVE" == cluster.status().get("status"), 90, "master alive", cluster.logs)
        with open(cluster.logs[1], "wb") as log:
            procs.append(subprocess.Popen(
                [spark_bin("spark-class"), "org.apache.spark.deploy.worker.Worker", master_url,
                 "--host", HOST, "--port", str(worker_port), "--webui-port", str(worker_ui),
                 "--cores", str(cores), "--memory", memory, "--work-dir", str(work / "worker")],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        _wait(lambda: any(w.get("state") == "ALIVE" for w in cluster.status().get("workers", [])),
              90, "worker registered", cluster.logs)
        yield cluster
    finally:
        for proc in reversed(procs):
            stop_process(proc)
