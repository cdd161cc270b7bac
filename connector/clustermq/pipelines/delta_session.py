"""A job's SparkSession with Delta Lake: the cached jars on the class path, Delta's SQL
extension and catalog.

The jars must be on ``spark.jars`` when the JVM starts: the Delta SQL extension and catalog are
loaded by the driver's class loader, which a later session in the same JVM cannot extend.
PySpark passes the builder's configuration to ``spark-submit`` when it launches the JVM, so the
first session of a process must be built here. The jars themselves come from
:mod:`clustermq.pipelines.delta_jars` (never downloaded at start).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession

from clustermq.pipelines.delta_jars import delta_jars
from clustermq.pipelines.session import job_session

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"

# Local sessions only (override with extra_conf). Delta rebuilds a table's state with this many
# tasks after every commit; its default of 50 made a 1,000-row batch take ~30 s on 2 cores
# instead of ~3 s (measured). The console progress bar garbles the jobs' own progress lines.
LOCAL_DEFAULTS = {
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.ui.showConsoleProgress": "false",
}


def delta_conf() -> dict[str, str]:
    """The SparkSession settings that enable Delta with the cached jars."""
    return {
        "spark.jars": ",".join(str(j) for j in delta_jars()),
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
    }


def delta_session(app_name: str, extra_conf: Mapping[str, str] | None = None) -> SparkSession:
    """The job's session (:func:`~clustermq.pipelines.session.job_session`) with Delta.

    Must be the first session of the process (see the module docstring); if a session without
    Delta is already active, the error says so instead of failing later on a missing class.
    """
    conf = delta_conf()
    active = SparkSession.getActiveSession()
    if active is not None and active.conf.get("spark.sql.extensions", "") != DELTA_EXTENSION:
        raise RuntimeError(
            "a SparkSession without Delta is already running in this process; build the first "
            "session with clustermq.pipelines.delta_session.delta_session() (Delta's jars must "
            "be on the class path when the JVM starts)"
        )
    conf.update(LOCAL_DEFAULTS)
    conf.update(extra_conf or {})
    return job_session(app_name, conf)
