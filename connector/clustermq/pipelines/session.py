"""One way to build a local SparkSession for jobs, tests, demos and benchmarks."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession


def local_session(
    app_name: str = "clustermq",
    master: str = "local[2]",
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession whose Python workers run this interpreter (with clustermq installed).

    ``format("clustermq")`` then resolves through Spark's auto-registration of the top-level
    ``pyspark_clustermq`` module (registering again would only replace it, with a warning).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
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
