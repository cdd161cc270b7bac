"""The SparkSession of a job (``spark_jobs/``, the demo, the benchmark)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession


def job_session(app_name: str, extra_conf: Mapping[str, str] | None = None) -> SparkSession:
    """The job's SparkSession: local, on this machine, running this interpreter's clustermq.

    What it sets, and why:

    * ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` (unless set) to this interpreter, so the
      Python workers import the clustermq installed here; ``format("clustermq")`` then resolves
      through Spark's auto-registration of the top-level ``pyspark_clustermq`` module.
    * master ``local[2]``: the jobs run on the machine they are started on.
    * ``spark.sql.shuffle.partitions=4``: Spark's default of 200 shuffle tasks is sized for a
      cluster; on two local cores each extra task is overhead.
    * ``spark.ui.enabled=false``: no web server (and no port taken) per job.
    * ``spark.sql.streaming.stopActiveRunOnRestart=true``: a query restarted from its
      checkpoint in the same process replaces the old run instead of failing.
    * Spark's log level WARN, so the jobs' own progress lines stay readable.

    ``extra_conf`` is applied last and wins.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.streaming.stopActiveRunOnRestart", "true")
    )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
