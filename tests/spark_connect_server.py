"""A Spark Connect server for the tests, started from the ``spark-connect`` jar pyspark ships.

``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer`` on a free
loopback port, local master, this venv's Python for its Python workers (which run the data
source); stopped by pid. Clients reach it as ``sc://127.0.0.1:<port>``.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from clustermq.devtools.localcluster.ports import free_ports
from spark_standalone import HOST, SPARK_HOME, spark_bin, spark_env, stop_process

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


@dataclass
class ConnectServer:
    url: str
    log: Path

    def log_tail(self, chars: int = 5000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"


def connect_jar() -> Path:
    """The server's jar: pyspark ships it in its ``jars/``, so it is on spark-submit's class path."""
    (jar,) = (SPARK_HOME / "jars").glob("spark-connect_*.jar")
    return jar


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


@contextmanager
def connect_server(work: Path) -> Iterator[ConnectServer]:
    work.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    log = work / "connect-server.log"
    connect_jar()  # fails clearly if this pyspark does not ship the server
    cmd = [spark_bin("spark-submit"), "--class", SERVER_CLASS, "--master", "local[2]",
           "--name", "clustermq Spark Connect server",
           "--conf", f"spark.connect.grpc.binding.port={port}",
           "--conf", f"spark.connect.grpc.binding.address={HOST}",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
           "--conf", f"spark.local.dir={work / 'local'}",
           "spark-internal"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=spark_env(),
                                cwd=work, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("Spark Connect server did not listen on port "
                                     f"{port}:\n{log.read_text(errors='replace')[-5000:]}")
            time.sleep(0.3)
        yield ConnectServer(f"sc://{HOST}:{port}", log)
    finally:
        stop_process(proc)
