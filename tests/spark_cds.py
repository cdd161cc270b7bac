"""A class-data-sharing archive of Spark's classes for the suite's Spark JVMs.

Why: the suite starts a Spark JVM a few dozen times (its own session, and every job driver a
fault test runs and kills), and on 2 cores most of a start is loading and verifying Spark's,
Delta's and Scala's classes. JDK 17 can dump the classes a run loaded into an archive
(``-XX:ArchiveClassesAtExit``) that later JVMs map instead of parsing the jars again
(``-XX:SharedArchiveFile``). Measured (3 alternating runs each): a session with
Delta, a small Delta write and an anti-join took 11.5-11.7 s without the archive and 6.8-7.0 s
with it.

The archive is made once per venv and JDK, by one throwaway run of the workload the tests
repeat most (a Delta session, a streaming foreachBatch that anti-joins and appends to a Delta
table), and kept under ``.cache/``. Its name carries a digest of everything the JVM checks
when it maps an archive (the JDK, the class path's jars), so a changed pyspark, Delta or JDK
gets a new archive instead of a silently unused one. If the archive cannot be made, the tests
run without it: it changes start time, never behaviour (a JVM whose class path no longer
matches an archive ignores it).

This is test tooling only: jobs and ``make bench`` run the JVM's defaults.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "clustermq" / "spark-cds"

# What the archive-making run does: the classes the suite's Spark JVMs load most.
_WORKLOAD = textwrap.dedent(
    """
    import sys, time
    from pyspark import SparkContext

    table, tests = sys.argv[1], sys.argv[2]
    sys.path.insert(0, tests)
    from sparksession import local_session

    spark = local_session("clustermq-cds", {"spark.sql.shuffle.partitions": "2"}, delta=True)
    spark.range(10).selectExpr("cast(id as string) as id").write.format("delta").save(table)

    def append(batch, batch_id):
        existing = spark.read.format("delta").load(table)
        batch.join(existing, "id", "left_anti").write.format("delta").mode("append").save(table)

    query = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
             .selectExpr("cast(value as string) as id")
             .writeStream.foreachBatch(append)
             .option("checkpointLocation", table + "-checkpoint")
             .trigger(processingTime="500 milliseconds").start())
    deadline = time.monotonic() + 60
    while query.lastProgress is None or query.lastProgress["batchId"] < 3:
        if time.monotonic() > deadline or query.exception() is not None:
            break
        time.sleep(0.2)
    query.stop()
    spark.read.format("delta").load(table).count()
    spark.stop()
    # The JVM writes the archive when it exits, and it exits when its stdin closes: wait
    # for that here, so the file is whole when this process ends.
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    if proc is not None:
        proc.stdin.close()
        proc.wait(timeout=300)
    """
)


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def _archive_key() -> str:
    """A digest of what decides whether a JVM can map the archive."""
    from clustermq.pipelines.delta_jars import delta_jars, spark_jars_dir

    digest = hashlib.sha256()
    version = subprocess.run([_java(), "-version"], capture_output=True, text=True, timeout=60)
    digest.update(version.stderr.encode())
    for jar in sorted(spark_jars_dir().glob("*.jar")) + delta_jars():
        stat = jar.stat()
        digest.update(f"{jar}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def spark_archive(base_options: str, report: Callable[[str], None]) -> Path | None:
    """The archive for this venv and JDK, made now if missing; ``None`` if it cannot be made.

    ``base_options`` are the JVM options the suite runs with; the archive is dumped with them.
    ``report`` gets one line on what was made or why nothing was (pytest's terminal, since
    collection output is captured).
    """
    try:
        key = _archive_key()
    except Exception as exc:  # no Delta jars yet, no java: run without an archive
        report(f"spark CDS archive: not used ({exc})")
        return None
    archive = CACHE / f"spark-{key}.jsa"
    if archive.is_file():
        return archive
    CACHE.mkdir(parents=True, exist_ok=True)
    # The suite's parallel workers collect at the same moment: one makes the archive, the
    # others wait for it here instead of making it too.
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return archive if archive.is_file() else _make(archive, key, base_options, report)


def _make(archive: Path, key: str, base_options: str, report: Callable[[str], None]) -> Path | None:
    work = CACHE / f".work-{os.getpid()}"
    partial = CACHE / f".spark-{key}.{os.getpid()}.jsa"
    env = dict(os.environ)
    env["SPARK_SUBMIT_OPTS"] = f"{base_options} -XX:ArchiveClassesAtExit={partial}"
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.monotonic()
    report(f"spark CDS archive: making {archive.name} (once per venv and JDK)")
    try:
        done = subprocess.run(
            [sys.executable, "-c", _WORKLOAD, str(work / "table"), str(ROOT / "tests")],
            env=env, capture_output=True, text=True, timeout=600,
        )
        if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            tail = (done.stderr or "").strip().splitlines()[-5:]
            report(f"spark CDS archive: not made (exit {done.returncode}): {tail}")
            return None
        os.replace(partial, archive)
        for stale in CACHE.glob("spark-*.jsa"):  # archives of an earlier pyspark, Delta or JDK
            if stale != archive:
                stale.unlink(missing_ok=True)
    except (OSError, subprocess.SubprocessError) as exc:
        report(f"spark CDS archive: not made ({exc})")
        return None
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    size = archive.stat().st_size / 2**20
    report(f"spark CDS archive: {size:.0f} MiB in {time.monotonic() - started:.0f} s")
    return archive
