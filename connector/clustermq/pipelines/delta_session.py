"""A job's SparkSession with Delta Lake, by whichever route the deployment provides Delta.

Delta's jars must be on the class path when the JVM starts: its SQL extension and catalog are
loaded by the driver's class loader, which nothing can extend later. So:

* under ``spark-submit`` the JVM already runs: Delta comes from ``--packages`` (or ``--jars``)
  on the command line, and the job only adds the extension and catalog settings;
* started as plain ``python``, the job launches the JVM and picks the jars itself: delta-spark's
  own helper when ``pip install 'clustermq[delta]'`` installed it (it lets Spark resolve
  :data:`DELTA_MAVEN_PACKAGE` from Maven), else the offline jar cache
  (:mod:`clustermq.pipelines.delta_jars`) when it was filled, else jars the user configured;
* either way the session is checked for Delta's catalog class at once, and a missing Delta
  fails before anything is read, naming these routes (:class:`DeltaJarsMissing`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

from pyspark.sql import SparkSession

from clustermq.errors import DeltaJarsMissing
from clustermq.pipelines.delta_jars import cache_is_complete, delta_jars
from clustermq.pipelines.spark_session import (
    Builder,
    job_session,
    launched_by_spark_submit,
    spark_defaults,
    submit_args,
)

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
#: The Delta release the project is built and tested with (also pinned in
#: clustermq/pipelines/delta_pom.xml and conf/constraints.txt, inside the range of the ``delta``
#: extra of pyproject.toml; tests keep them equal).
DELTA_MAVEN_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"

ROUTES = (
    "give the job Delta Lake by one of these routes: "
    f"(1) spark-submit --packages {DELTA_MAVEN_PACKAGE} ...; "
    "(2) without Maven access: spark-submit --jars \"$(python -m clustermq.pipelines.delta_jars "
    "--jars)\" ... (the offline jar cache, filled once by python -m clustermq.pipelines.delta_jars "
    "on a machine with Maven); "
    "(3) started as plain python: pip install 'clustermq[delta]' (delta-spark's helper) or fill "
    "the offline jar cache as in (2)"
)


def delta_settings() -> dict[str, str]:
    """The settings that turn Delta on in a session whose class path has its jars."""
    return {"spark.sql.extensions": DELTA_EXTENSION, "spark.sql.catalog.spark_catalog": DELTA_CATALOG}


def delta_conf() -> dict[str, str]:
    """:func:`delta_settings` plus the offline cache's jars (``spark.jars``)."""
    return {"spark.jars": ",".join(str(j) for j in delta_jars()), **delta_settings()}


def user_configured_delta() -> bool:
    """Whether the user already put Delta's jars on the class path of a plain ``python`` launch
    (``--jars``/``--packages`` or ``spark.jars``/``spark.jars.packages`` naming Delta)."""
    args = submit_args()
    given = [value for flag, value in zip(args, args[1:], strict=False)
             if flag in ("--jars", "--packages")]
    given += [value.split("=", 1)[1] for flag, value in zip(args, args[1:], strict=False)
              if flag == "--conf" and value.split("=", 1)[0] in ("spark.jars", "spark.jars.packages")]
    defaults = spark_defaults()
    given += [defaults.get("spark.jars", ""), defaults.get("spark.jars.packages", "")]
    return any("delta" in value for value in given)


def _pip_route(builder: Builder) -> Builder:
    from delta import configure_spark_with_delta_pip  # the optional 'delta' extra

    return configure_spark_with_delta_pip(builder)


def delta_session(app_name: str, extra_conf: Mapping[str, str] | None = None) -> SparkSession:
    """The job's session (:func:`~clustermq.pipelines.spark_session.job_session`) with Delta.

    An already active session is used as it is when Delta's classes are on its class path (the
    class path cannot change once the JVM runs); otherwise the error names the routes.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        # A session the platform made (a Databricks notebook or job) or an earlier one of this
        # process: its class path is settled; use it if Delta is there, else name the routes.
        require_delta(active)
        return active
    conf = delta_settings()
    configure = None
    if not launched_by_spark_submit() and not user_configured_delta():
        if importlib.util.find_spec("delta") is not None:
            configure = _pip_route
        elif cache_is_complete():
            conf = delta_conf()
        else:
            raise DeltaJarsMissing(f"Delta Lake is not installed for this job: {ROUTES}")
    conf.update(extra_conf or {})
    spark = job_session(app_name, conf, configure)
    try:
        require_delta(spark)
    except DeltaJarsMissing:
        spark.stop()
        raise
    return spark


def require_delta(spark: SparkSession) -> None:
    """Fail now, naming the routes, when Delta's catalog class is not on the class path."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(DELTA_CATALOG, False, loader)
    except Exception as exc:
        if "ClassNotFoundException" not in str(exc):
            raise
        raise DeltaJarsMissing(f"Delta Lake is not on the Spark class path ({DELTA_CATALOG}); {ROUTES}") from None
