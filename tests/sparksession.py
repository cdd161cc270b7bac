"""The test suite's SparkSessions: the fixture's, the CDS archive run's and the test drivers'.

The suite builds its sessions here rather than with the jobs' builder
(``clustermq.pipelines.spark_session.job_session``), so the jobs' session can follow how jobs are
deployed while the tests keep a small local one. Delta's settings come from
``clustermq.pipelines.delta_session``, the one place they are defined.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from clustermq.pipelines.delta_session import delta_conf
from clustermq.pipelines.spark_home import use_bytecode_home
from clustermq.pipelines.spark_session import LOCAL_TUNING


def local_session(
    app_name: str, extra_conf: Mapping[str, str] | None = None, delta: bool = False
) -> SparkSession:
    """A local[2] session whose Python workers run this interpreter (with clustermq installed),
    from the Spark home whose Python processes import PySpark with bytecode (the jobs' too).

    Shuffle partitions 4, no UI, and a query restarted in the same process replaces its old run
    (``stopActiveRunOnRestart``), as the tests restart queries from their checkpoints. With
    ``delta`` the cached Delta jars, extension and catalog are added: that must be the first
    session of the process, Delta's jars have to be on the class path when the JVM starts.
    ``extra_conf`` is applied last and wins.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    use_bytecode_home()
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.streaming.stopActiveRunOnRestart": "true",
    }
    if delta:
        conf.update(delta_conf())
        conf.update({k: v for k, v in LOCAL_TUNING.items() if k != "spark.sql.shuffle.partitions"})
    conf.update(extra_conf or {})
    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
