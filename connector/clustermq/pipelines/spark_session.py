"""The SparkSession of a job (:mod:`clustermq.jobs`, the demo, the benchmark), wherever it is launched.

A job is a Spark application: under ``spark-submit`` (YARN, Kubernetes, standalone) the JVM and
its master already exist when the job's Python starts, and whatever the job set on the builder
would silently override the user's ``--master`` and ``--conf``. So the builder here sets nothing
a deployment decides (master, shuffle partitions, UI, log level) when a master is configured,
and defaults only the master, to a local one, when the job is started as plain ``python`` with
no master anywhere.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from clustermq.pipelines.spark_home import use_bytecode_home

#: the master a job started as plain ``python`` uses when none is configured
LOCAL_MASTER = "local[*]"
#: Settings that make a job on one small machine fast: the demo, the benchmark, and a job that
#: chose ``local[*]`` itself (:func:`job_session`, for every key the user did not set). Delta
#: rebuilds a table's state with
#: ``snapshotPartitions`` tasks after every commit: its default of 50 made a 1,000-row batch
#: take ~30 s on 2 cores instead of ~3 s (docs/design.md, "Pipelines: exactly once into
#: Delta"). Spark's 200 shuffle partitions are sized
#: for a cluster; the console progress bar garbles the jobs' progress lines.
LOCAL_TUNING: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.ui.showConsoleProgress": "false",
}

Builder = SparkSession.Builder


def launched_by_spark_submit() -> bool:
    """Whether this Python was started by ``spark-submit`` (its JVM is already running).

    spark-submit's PythonRunner hands the driver its gateway in ``PYSPARK_GATEWAY_PORT``; pyspark
    itself uses the same variable to decide whether to launch a JVM.
    """
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_defaults() -> dict[str, str]:
    """The ``spark-defaults.conf`` spark-submit will read (``$SPARK_CONF_DIR``, else
    ``$SPARK_HOME/conf``); empty when there is none."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir and os.environ.get("SPARK_HOME"):
        conf_dir = str(Path(os.environ["SPARK_HOME"]) / "conf")
    if not conf_dir:
        return {}
    path = Path(conf_dir) / "spark-defaults.conf"
    if not path.is_file():
        return {}
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and not parts[0].startswith("#"):
            values[parts[0]] = parts[1].strip()
    return values


def submit_args() -> list[str]:
    """``PYSPARK_SUBMIT_ARGS``: what plain ``python`` passes to the spark-submit it launches."""
    return shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))


def user_conf_keys() -> set[str]:
    """The Spark settings the user gave outside the job: ``spark-defaults.conf`` and
    ``--conf``/``-c`` in ``PYSPARK_SUBMIT_ARGS``."""
    keys = set(spark_defaults())
    args = submit_args()
    for flag, value in zip(args, args[1:]):
        if flag in ("--conf", "-c") and "=" in value:
            keys.add(value.split("=", 1)[0])
    keys.update(arg.removeprefix("--conf=").split("=", 1)[0] for arg in args if arg.startswith("--conf="))
    return keys


def local_tuning() -> dict[str, str]:
    """:data:`LOCAL_TUNING` without the keys the user set outside the job, which win."""
    given = user_conf_keys()
    return {key: value for key, value in LOCAL_TUNING.items() if key not in given}


def master_is_configured() -> bool:
    """A master chosen outside the job: spark-submit, ``--master`` in ``PYSPARK_SUBMIT_ARGS``,
    ``spark.master`` in spark-defaults.conf, or ``SPARK_MASTER``."""
    return (launched_by_spark_submit() or "--master" in submit_args()
            or "spark.master" in spark_defaults() or bool(os.environ.get("SPARK_MASTER")))


def job_session(
    app_name: str,
    extra_conf: Mapping[str, str] | None = None,
    configure: Callable[[Builder], Builder] | None = None,
) -> SparkSession:
    """The job's SparkSession, as the deployment configured it.

    * Under spark-submit: the running application's session; only ``extra_conf`` (the job's own
      needs, e.g. Delta's extension) is added.
    * Plain ``python``: the master from ``SPARK_MASTER``, else whatever spark-defaults.conf or
      ``PYSPARK_SUBMIT_ARGS`` say, else ``local[*]``. The Python workers run this interpreter
      (``PYSPARK_PYTHON``, unless set), so they import the clustermq installed here and
      ``format("clustermq")`` resolves through Spark's auto-registration of the top-level
      ``pyspark_clustermq`` module. Unless ``SPARK_HOME`` is set, the JVM runs from
      :func:`clustermq.pipelines.spark_home.bytecode_home`, so the Python processes it starts
      import PySpark with its cached bytecode rather than compile it from ``pyspark.zip``.

    With a master configured, shuffle partitions, UI and log level stay Spark's defaults unless
    the user sets them. With ``local[*]`` chosen here the job runs on this one machine, so it
    also takes :data:`LOCAL_TUNING` for every key the user did not set: Delta's default of 50
    snapshot partitions cost a plain-python ``queue_to_delta`` 4-5 s per 2,500-message batch
    on 2 cores, against 1-2 s with 2. ``configure`` edits the builder last, before the JVM
    starts (delta-spark's ``configure_spark_with_delta_pip`` is such a function).
    """
    builder = SparkSession.builder.appName(app_name)
    if not launched_by_spark_submit():
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        use_bytecode_home()
        if os.environ.get("SPARK_MASTER"):
            builder = builder.master(os.environ["SPARK_MASTER"])
        elif not master_is_configured():
            builder = builder.master(LOCAL_MASTER)
            for key, value in local_tuning().items():
                builder = builder.config(key, value)
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    if configure is not None:
        builder = configure(builder)
    return builder.getOrCreate()
