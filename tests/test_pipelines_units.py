"""Fast checks of the pipeline plumbing: job settings, the Delta jar cache, option refusals."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from clustermq.pipelines.jobs import JobConfigError, load_config, merge_settings, parse_key_values

ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_flags_win_over_the_config_file_which_wins_over_defaults(tmp_path: Path) -> None:
    conf = write(tmp_path / "j.conf", "[queue_to_delta]\nqueue = from_file\ntrigger = availableNow\n"
                 "[reader_options]\nreplayTimeout = 5000\n")
    settings, reader = load_config(str(conf), "queue_to_delta")
    args = argparse.Namespace(queue="from_flag", trigger=None, brokers="h:1", table="t",
                              checkpoint="c", dedupe=None)
    merged = merge_settings(args, settings, {"trigger": "processingTime=5s", "dedupe": "redelivered"},
                            ("brokers", "queue", "table", "checkpoint"))
    assert (merged.queue, merged.trigger, merged.dedupe) == ("from_flag", "availableNow", "redelivered")
    assert reader == {"replayTimeout": "5000"}


def test_a_missing_required_setting_names_the_flag_and_the_key() -> None:
    args = argparse.Namespace(queue=None, brokers="h:1")
    with pytest.raises(JobConfigError, match=r"--queue is required \(or 'queue' in the config file\)"):
        merge_settings(args, {}, {}, ("brokers", "queue"))


def test_an_unknown_config_key_is_an_error(tmp_path: Path) -> None:
    conf = write(tmp_path / "j.conf", "[queue_to_delta]\nqeue = typo\n")
    settings, _ = load_config(str(conf), "queue_to_delta")
    with pytest.raises(JobConfigError, match="unknown key.*qeue"):
        merge_settings(argparse.Namespace(), settings, {}, ("queue",))


@pytest.mark.parametrize("text", ["[queue_to_delta]\npassword = s3cret\n",
                                  "[reader_options]\nusername = app\n"])
def test_credentials_are_never_read_from_config_files(tmp_path: Path, text: str) -> None:
    conf = write(tmp_path / "j.conf", text)
    with pytest.raises(JobConfigError, match="CLUSTERMQ_USERNAME") as failure:
        load_config(str(conf), "queue_to_delta")
    assert "s3cret" not in str(failure.value)


def test_credentials_are_refused_as_option_flags() -> None:
    with pytest.raises(JobConfigError, match="CLUSTERMQ_PASSWORD"):
        parse_key_values(["password=s3cret"], "--option")
    assert parse_key_values(["a=b=c"], "--option") == {"a": "b=c"}


def test_the_shipped_config_file_parses() -> None:
    settings, _ = load_config(str(ROOT / "conf" / "queue_to_delta.conf"), "queue_to_delta")
    assert settings == {"trigger": "processingTime=5s", "max_messages_per_trigger": "10000",
                        "dedupe": "redelivered"}


def test_the_delta_pin_and_a_missing_cache_error_that_names_make_setup(tmp_path: Path) -> None:
    from clustermq.pipelines.delta_jars import DeltaJarsMissing, delta_jars, pinned_artifact

    assert pinned_artifact() == ("delta-spark_4.2_2.13", "4.4.0")
    with pytest.raises(DeltaJarsMissing, match="make setup"):
        delta_jars(cache=tmp_path)


def test_jars_pyspark_ships_are_recognised_by_artifact_id(tmp_path: Path) -> None:
    from clustermq.pipelines.delta_jars import artifacts_in

    for name in ("scala-library-2.13.18.jar", "zstd-jni-1.5.7-7.jar", "spark-core_2.13-4.2.0.jar"):
        (tmp_path / name).write_bytes(b"")
    assert artifacts_in(tmp_path) == {"scala-library", "zstd-jni", "spark-core_2.13"}


def test_batch_read_refuses_drain_and_artemis_before_any_task() -> None:
    from clustermq.options import OptionError, ReadOptions
    from clustermq.read.browse import check_browse_mode

    base = {"brokers": "127.0.0.1:1", "queue": "q"}
    with pytest.raises(OptionError, match="export_backlog.py --mode drain"):
        check_browse_mode(ReadOptions.parse({**base, "mode": "drain"}))
    with pytest.raises(OptionError, match="Artemis cannot browse"):
        check_browse_mode(ReadOptions.parse({**base, "flavor": "artemis"}))
    check_browse_mode(ReadOptions.parse(base))  # browse on classic/auto is fine


def queue_to_delta_job():  # type: ignore[no-untyped-def]
    """spark_jobs/queue_to_delta.py as a module (its flag parsing needs no Spark)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("queue_to_delta_job", ROOT / "spark_jobs" / "queue_to_delta.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REQUIRED_FLAGS = ["--brokers", "h:1", "--queue", "q", "--table", "t", "--checkpoint", "c"]


def test_parse_flags_and_config_build_the_body_parse(tmp_path: Path) -> None:
    job = queue_to_delta_job()
    assert job.parse_args(REQUIRED_FLAGS).body_parse is None
    parse = job.parse_args(REQUIRED_FLAGS + ["--parse", "json", "--schema", "order long"]).body_parse
    assert (parse.format, parse.schema, parse.corrupt_column) == ("json", "order long", "_corrupt")
    conf = write(tmp_path / "j.conf", "[queue_to_delta]\nparse = json\nschema = a int, b string\n")
    parse = job.parse_args(REQUIRED_FLAGS + ["--config", str(conf)]).body_parse
    assert parse.schema == "a int, b string"


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--parse", "json"], "--parse json needs --schema"),
        (["--schema", "a int"], "--schema is set but --parse is not"),
    ],
)
def test_parse_settings_that_cannot_work_are_refused_before_spark(extra: list[str], fragment: str) -> None:
    with pytest.raises(JobConfigError, match=fragment):
        queue_to_delta_job().parse_args(REQUIRED_FLAGS + extra)


def test_an_unknown_parse_format_in_the_config_file_is_refused(tmp_path: Path) -> None:
    conf = write(tmp_path / "j.conf", "[queue_to_delta]\nparse = xml\nschema = a int\n")
    with pytest.raises(JobConfigError, match="--parse: 'xml' is not one of json"):
        queue_to_delta_job().parse_args(REQUIRED_FLAGS + ["--config", str(conf)])


def test_the_job_help_documents_the_parse_and_the_corrupt_column() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "spark_jobs" / "queue_to_delta.py"), "--help"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert "--parse {json}" in out and "--schema DDL" in out and "_corrupt" in out


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("a,b", "','"), ("a?b", "'?'"), ("a.#", "'#'"), ("a.*", "'*'"), ("a.>", "'>'"),
        ("a\tb", "'\\t'"), ("x" * 1025, "at most 1024"),
    ],
)
def test_queue_names_brokers_would_misroute_are_refused(name: str, fragment: str) -> None:
    from clustermq.broker.queue_names import check_queue_name
    from clustermq.errors import OptionError

    with pytest.raises(OptionError) as err:
        check_queue_name(name)
    assert "option 'queue'" in str(err.value) and fragment in str(err.value)
    assert "allowed" in str(err.value) or "at most" in str(err.value)
    for ok in ("orders", "a.b-c_d", "é.q", "x" * 1024, "a/b"):
        assert check_queue_name(ok) == ok


# ----------------------------------------------------------------------------- job sessions
def test_delta_release_is_pinned_once_in_three_places() -> None:
    """The Maven package in the routes, the offline cache's pom and the `delta` extra agree."""
    import tomllib

    from clustermq.pipelines.delta_jars import pinned_artifact
    from clustermq.pipelines.delta_session import DELTA_MAVEN_PACKAGE

    artifact, version = pinned_artifact()
    assert DELTA_MAVEN_PACKAGE == f"io.delta:{artifact}:{version}"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["delta"] == [f"delta-spark=={version}"]


@pytest.mark.parametrize(
    "env,defaults,configured",
    [
        ({}, None, False),
        ({"PYSPARK_GATEWAY_PORT": "40000"}, None, True),  # started by spark-submit
        ({"PYSPARK_SUBMIT_ARGS": "--master spark://h:7077 pyspark-shell"}, None, True),
        ({"SPARK_MASTER": "spark://h:7077"}, None, True),
        ({}, "spark.master  yarn\n", True),
        ({}, "# spark.master yarn\nspark.ui.enabled false\n", False),
    ],
)
def test_a_job_sets_no_master_when_the_deployment_configured_one(
    env: dict[str, str], defaults: str | None, configured: bool, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from clustermq.pipelines import session

    for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_SUBMIT_ARGS", "SPARK_MASTER", "SPARK_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    if defaults is not None:
        (tmp_path / "spark-defaults.conf").write_text(defaults)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert session.master_is_configured() is configured


def test_delta_routes_name_every_way_to_get_delta() -> None:
    from clustermq.pipelines.delta_session import DELTA_MAVEN_PACKAGE, ROUTES

    assert f"--packages {DELTA_MAVEN_PACKAGE}" in ROUTES
    assert "python -m clustermq.pipelines.delta_jars --jars" in ROUTES
    assert "clustermq[delta]" in ROUTES


def test_lag_line_names_every_node_with_its_backlog() -> None:
    from clustermq.pipelines.streaming import lag_line

    latest = {"a:1": {"offset": 10, "buffered": 4, "acknowledged": 6, "backlog": 90},
              "b:2": {"offset": 3, "buffered": 0, "acknowledged": 3}}
    progress = {"batchId": 7, "sources": [{"latestOffset": json.dumps(latest)}]}
    assert lag_line(progress) == ("lag after batch 7: a:1 backlog 90, buffered 4, acknowledged 6; "
                                  "b:2 buffered 0, acknowledged 3")
    assert lag_line({"batchId": 1, "sources": [{"latestOffset": '{"a:1": 5}'}]}) is None


@pytest.mark.parametrize(
    "args,configured",
    [
        ("--conf spark.databricks.delta.snapshotPartitions=2 pyspark-shell", False),
        ("--packages io.delta:delta-spark_4.2_2.13:4.4.0 pyspark-shell", True),
        ("--conf spark.jars=/x/delta-spark.jar pyspark-shell", True),
        ("--jars /x/other.jar pyspark-shell", False),
    ],
)
def test_delta_counts_as_configured_only_when_its_jars_are_given(
    args: str, configured: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from clustermq.pipelines.delta_session import user_configured_delta

    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", args)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert user_configured_delta() is configured
