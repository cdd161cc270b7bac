"""The Spark home a session this Python launches runs from (``clustermq.pipelines.spark_home``):
the Python processes Spark starts import PySpark from site-packages, with bytecode, instead of
compiling it from ``pyspark.zip``; and it is made only where that is the same code.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyspark
import pytest
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from clustermq.pipelines import spark_home


class _WhereReader(DataSourceStreamReader):
    """Records, from the streaming source's runner process, where it imported PySpark from."""

    def __init__(self, options: dict) -> None:
        self.log = options["log"]

    def initialOffset(self) -> dict:
        with open(self.log, "w") as fh:
            json.dump({"pyspark": pyspark.__file__, "path": sys.path}, fh)
        return {"n": 0}

    def latestOffset(self) -> dict:
        return {"n": 1}

    def partitions(self, start: dict, end: dict):  # type: ignore[no-untyped-def]
        return [InputPartition(0)]

    def read(self, partition):  # type: ignore[no-untyped-def]
        yield (1,)


class _WhereSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sparkhomeprobe"

    def schema(self) -> str:
        return "i int"

    def streamReader(self, schema):  # type: ignore[no-untyped-def]
        return _WhereReader(self.options)


@pytest.mark.spark
def test_the_source_runner_imports_pyspark_with_bytecode_not_from_the_zip(spark, tmp_path: Path) -> None:
    spark.dataSource.register(_WhereSource)
    log = tmp_path / "where.json"
    query = (spark.readStream.format("sparkhomeprobe").option("log", str(log)).load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    where = json.loads(log.read_text())
    assert where["pyspark"] == str(spark_home.installed_home() / "__init__.py"), where
    assert not any(Path(p).name == "pyspark.zip" and Path(p).exists() for p in where["path"]), where


def test_the_home_links_the_installed_one_without_the_zip(tmp_path: Path) -> None:
    home = spark_home.bytecode_home(tmp_path)
    installed = spark_home.installed_home()
    assert (home / "bin" / "spark-submit").resolve() == installed / "bin" / "spark-submit"
    assert (home / "jars").resolve() == installed / "jars"
    assert (installed / spark_home.PYSPARK_ZIP).is_file()
    assert not (home / spark_home.PYSPARK_ZIP).exists()
    assert sorted(p.name for p in (home / "python" / "lib").iterdir()) == sorted(
        p.name for p in (installed / "python" / "lib").iterdir() if p.name != spark_home.PYSPARK_ZIP.name)
    assert spark_home.bytecode_home(tmp_path) == home


@pytest.mark.parametrize("env, used", [
    ({}, True),
    ({"SPARK_HOME": "/opt/spark"}, False),
    ({"PYSPARK_PYTHON": "/usr/bin/python3.12"}, False),
    ({"PYSPARK_DRIVER_PYTHON": "/usr/bin/python3.12"}, False),
])
def test_the_home_is_used_only_when_no_home_was_given_and_spark_runs_this_python(
    env: dict[str, str], used: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CLUSTERMQ_CACHE", str(tmp_path))
    spark_home.use_bytecode_home()
    expected = str(spark_home.bytecode_home(tmp_path)) if used else env.get("SPARK_HOME")
    assert os.environ.get("SPARK_HOME") == expected
