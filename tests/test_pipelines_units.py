"""Fast checks of the pipeline plumbing: job settings, the Delta jar cache, option refusals."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from clustermq.pipelines.job_config import JobConfigError, load_config, merge_settings, parse_key_values

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
    with pytest.raises(OptionError, match=r"export_backlog(\.py)? --mode drain"):
        check_browse_mode(ReadOptions.parse({**base, "mode": "drain"}))
    with pytest.raises(OptionError, match="Artemis cannot browse"):
        check_browse_mode(ReadOptions.parse({**base, "flavor": "artemis"}))
    check_browse_mode(ReadOptions.parse(base))  # browse on classic/auto is fine
    amqp = {"transport": "amqp", "amqpBrokers": "127.0.0.1:2"}
    check_browse_mode(ReadOptions.parse({**base, "flavor": "artemis", **amqp}))  # over AMQP it browses


def queue_to_delta_job():  # type: ignore[no-untyped-def]
    """The queue_to_delta job's module (its flag parsing needs no Spark)."""
    from clustermq.jobs import queue_to_delta

    return queue_to_delta


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


@pytest.mark.parametrize(
    "park, queue, fragment",
    [
        ("q", [], "--park-queue: 'q' is read by the job (queue 'q'); park in a queue the job does not read"),
        ("orders.parked", ["--queue", "orders.>"], "'orders.parked' is read by the job (queue 'orders.>')"),
        ("orders.eu.parked", ["--queue", "pay,orders.*.parked"], "is read by the job (queue 'orders.*.parked')"),
        ("orders.>", [], "--park-queue: option 'queue'"),
    ],
)
def test_a_park_queue_that_cannot_work_is_refused_before_spark(park: str, queue: list[str], fragment: str) -> None:
    """A park queue the job reads would feed the parked rows back into the failing batch."""
    with pytest.raises(JobConfigError, match=re.escape(fragment)):
        queue_to_delta_job().parse_args(REQUIRED_FLAGS + queue + ["--park-queue", park])


def test_a_park_queue_publishes_with_the_job_s_login_and_never_shows_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The park queue is written with the reader's connection options (the writer's share of
    them) and the job's credentials; the config file's key works like the flag."""
    monkeypatch.setenv("CLUSTERMQ_USERNAME", "app")
    monkeypatch.setenv("CLUSTERMQ_PASSWORD", "s3cret-park")
    conf = write(tmp_path / "j.conf", "[queue_to_delta]\npark_queue = orders.parked\n"
                                      "[reader_options]\nheartbeat = 5000\nreplayTimeout = 1000\n")
    park = queue_to_delta_job().parse_args(REQUIRED_FLAGS + ["--config", str(conf)]).park
    assert park.queue == "orders.parked"
    assert park.writer_options["queue"] == "orders.parked" and park.writer_options["heartbeat"] == "5000"
    assert "replayTimeout" not in park.writer_options  # a reader's option the writer refuses
    assert park.writer_options["password"] == "s3cret-park" and "s3cret-park" not in repr(park)
    assert queue_to_delta_job().parse_args(REQUIRED_FLAGS).park is None


def test_an_unknown_parse_format_in_the_config_file_is_refused(tmp_path: Path) -> None:
    conf = write(tmp_path / "j.conf", "[queue_to_delta]\nparse = xml\nschema = a int\n")
    with pytest.raises(JobConfigError, match="--parse: 'xml' is not one of json"):
        queue_to_delta_job().parse_args(REQUIRED_FLAGS + ["--config", str(conf)])


@pytest.mark.parametrize("how", ["module", "entry file"])
def test_the_job_help_documents_the_parse_and_the_corrupt_column(how: str) -> None:
    import subprocess
    import sys

    command = (["-m", "clustermq.jobs.queue_to_delta"] if how == "module"
               else [str(ROOT / "spark_jobs" / "queue_to_delta.py")])
    out = subprocess.run([sys.executable, *command, "--help"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert "--parse {json}" in out and "--schema DDL" in out and "_corrupt" in out
    assert "python -m clustermq.jobs.queue_to_delta" in out and "spark_jobs/queue_to_delta.py" in out


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
    """The Maven package in the routes, the offline cache's pom, the CI constraints agree, and
    the `delta` extra's range admits that release."""
    import tomllib
    from packaging.requirements import Requirement

    from clustermq.pipelines.delta_jars import pinned_artifact
    from clustermq.pipelines.delta_session import DELTA_MAVEN_PACKAGE

    artifact, version = pinned_artifact()
    assert DELTA_MAVEN_PACKAGE == f"io.delta:{artifact}:{version}"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (extra,) = [Requirement(r) for r in extras["delta"]]
    assert extra.name == "delta-spark" and version in extra.specifier, extra
    constraints = (ROOT / "conf" / "constraints.txt").read_text().splitlines()
    assert f"delta-spark=={version}" in constraints


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
    from clustermq.pipelines import spark_session as session

    for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_SUBMIT_ARGS", "SPARK_MASTER", "SPARK_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    if defaults is not None:
        (tmp_path / "spark-defaults.conf").write_text(defaults)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert session.master_is_configured() is configured


def test_a_job_on_its_own_local_master_takes_the_local_tuning_the_user_did_not_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from clustermq.pipelines import spark_session as session

    for name in ("PYSPARK_GATEWAY_PORT", "SPARK_MASTER", "SPARK_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    assert session.local_tuning() == session.LOCAL_TUNING
    assert session.LOCAL_TUNING["spark.databricks.delta.snapshotPartitions"] == "2"
    (tmp_path / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions  64\n")
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf spark.databricks.delta.snapshotPartitions=8 "
                                              "--conf=spark.ui.showConsoleProgress=true pyspark-shell")
    assert session.user_conf_keys() == {"spark.sql.shuffle.partitions", "spark.ui.showConsoleProgress",
                                        "spark.databricks.delta.snapshotPartitions"}
    assert session.local_tuning() == {}


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


# ----------------------------------------------------------------------------- job failures
JOBS = ("queue_to_delta", "export_backlog", "publish_table", "queue_to_parquet")
#: Each job's required flags, none of which needs Spark to be checked.
JOB_FLAGS = {
    "queue_to_delta": REQUIRED_FLAGS,
    "export_backlog": ["--brokers", "h:1", "--queue", "q", "--out", "o"],
    "publish_table": ["--brokers", "h:1", "--queue", "q", "--input", "i", "--body-json"],
    "queue_to_parquet": ["--brokers", "h:1", "--queue", "q", "--out", "o", "--checkpoint", "c"],
}

#: What pyspark's StreamingQueryException says when the reader, in the Python process Spark
#: runs the source in, found no node (abridged from a real run: the Java stack is longer).
STREAM_FAILED = """\
[STREAM_FAILED] Query [id = 5da42afe, runId = fec7bc81] terminated with exception: \
[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform \
prepareForTriggerAvailableNow: Traceback (most recent call last):
  File "/venv/pyspark.zip/pyspark/sql/streaming/python_streaming_source_runner.py", line 279, in main
  File "/work/connector/clustermq/read/consumer.py", line 92, in start
    raise NoNodeReachable("clustermq: no broker node is reachable: " + "; ".join(errors))
clustermq.errors.NoNodeReachable: clustermq: no broker node is reachable: broker node 127.0.0.1:1: \
cannot connect (ConnectFailedException)
 SQLSTATE: 38000
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.pythonStreamingDataSourceRuntimeError(QueryExecutionErrors.scala:1881)
\tat org.apache.spark.sql.execution.streaming.runtime.StreamExecution$$anon$1.run(StreamExecution.scala:236)
"""


class SparkTextError(Exception):
    """Stands in for pyspark's captured exceptions: all a job sees of them is their text."""


def test_a_connector_error_inside_a_streaming_failure_is_one_line_naming_the_node() -> None:
    from clustermq.jobs.runner import EXIT_FAILURE, describe_failure

    failure = describe_failure(SparkTextError(STREAM_FAILED))
    assert failure.exit_code == EXIT_FAILURE
    assert failure.cause == ("NoNodeReachable: no broker node is reachable: broker node "
                             "127.0.0.1:1: cannot connect (ConnectFailedException)")


def test_a_bad_option_inside_spark_is_a_setting_error() -> None:
    from clustermq.jobs.runner import EXIT_SETTING, describe_failure

    text = ("An exception was thrown from the Python worker.\nTraceback (most recent call last):\n"
            '  File "x.py", line 1, in f\nclustermq.errors.OptionError: option '
            "'prefetchPerNode': 'abc' is not a whole number\n\n\tat org.apache.spark.X(X.scala:1)")
    failure = describe_failure(SparkTextError(text))
    assert failure == type(failure)(EXIT_SETTING, "option 'prefetchPerNode': 'abc' is not a whole number")


@pytest.mark.parametrize(
    "error, code, cause",
    [
        (JobConfigError("--queue is required"), 2, "--queue is required"),
        ("node_unavailable", 1, "NodeUnavailable: broker node h:1: login refused"),
        (SparkTextError("Traceback (most recent call last):\n  File \"a.py\", line 1\n"
                        "    x()\nbuiltins.ValueError: not a queue\n"), 1, "ValueError: not a queue"),
        (SparkTextError("[PATH_NOT_FOUND] Path does not exist: file:/lake/t. SQLSTATE: 42K03\n"
                        "\tat org.apache.spark.X"), 1,
         "SparkTextError: [PATH_NOT_FOUND] Path does not exist: file:/lake/t."),
    ],
)
def test_every_failure_becomes_one_line_and_an_exit_code(error: object, code: int, cause: str) -> None:
    from clustermq.errors import NodeUnavailable
    from clustermq.jobs.runner import describe_failure

    class Named:
        name = "h:1"

    if error == "node_unavailable":
        error = NodeUnavailable(Named(), "login refused")
    assert isinstance(error, Exception)
    failure = describe_failure(error)
    assert (failure.exit_code, failure.cause) == (code, cause)
    assert "\n" not in failure.cause


def test_a_failure_line_never_shows_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    from clustermq.jobs.runner import describe_failure

    monkeypatch.setenv("CLUSTERMQ_PASSWORD", "s3cret")
    cause = describe_failure(SparkTextError("options {password=s3cret}")).cause
    assert "s3cret" not in cause and "***" in cause
    monkeypatch.setenv("CLUSTERMQ_PASSWORD", "p")  # a short one leaves other words alone
    cause = describe_failure(SparkTextError("option 'prefetch': p")).cause
    assert cause == "SparkTextError: option 'prefetch': ***"


@pytest.mark.parametrize("level, traceback_shown", [("INFO", False), ("DEBUG", True)])
def test_run_job_prints_one_line_and_the_traceback_only_at_debug(
    level: str, traceback_shown: bool, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from clustermq.jobs.runner import run_job

    monkeypatch.setenv("CLUSTERMQ_LOG_LEVEL", level)

    def failing() -> int:
        raise SparkTextError(STREAM_FAILED)

    assert run_job("queue_to_parquet", failing) == 1
    err = capsys.readouterr().err
    assert ("Traceback (most recent call last)" in err) is traceback_shown
    lines = [line for line in err.splitlines() if line.startswith("queue_to_parquet: error: ")]
    assert len(lines) == 1 and "127.0.0.1:1" in lines[0], err
    if not traceback_shown:
        assert err.splitlines() == lines


@pytest.mark.parametrize("job", JOBS)
def test_a_bad_flag_is_one_line_and_exit_2_and_help_is_exit_0(
    job: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib

    main = importlib.import_module(f"clustermq.jobs.{job}").main
    assert main([*JOB_FLAGS[job], "--no-such-flag"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"{job}: error: unrecognized arguments: --no-such-flag"]
    assert main(["--help"]) == 0
    assert f"python -m clustermq.jobs.{job}" in capsys.readouterr().out


@pytest.mark.parametrize("job", JOBS)
@pytest.mark.parametrize("item", ["password=s3cret", "Username=app", " password =s3cret"])
def test_every_job_refuses_credentials_in_option_flags(
    job: str, item: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib

    main = importlib.import_module(f"clustermq.jobs.{job}").main
    assert main([*JOB_FLAGS[job], "--option", item]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(f"{job}: error: --option: ")
    assert "CLUSTERMQ_USERNAME" in err and "CLUSTERMQ_PASSWORD" in err and "s3cret" not in err


def test_credentials_in_the_config_files_reader_options_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from clustermq.jobs import queue_to_delta

    conf = write(tmp_path / "j.conf", "[reader_options]\nPassword = s3cret\n")
    assert queue_to_delta.main([*REQUIRED_FLAGS, "--config", str(conf)]) == 2
    err = capsys.readouterr().err
    assert "[reader_options]: 'Password' is not accepted here" in err and "CLUSTERMQ_PASSWORD" in err
    assert "s3cret" not in err


def test_a_header_may_be_called_like_a_credential() -> None:
    from clustermq.jobs import publish_table

    args = publish_table.parse_args([*JOB_FLAGS["publish_table"], "--header", "username=user_col"])
    assert args.headers == {"username": "user_col"}


@pytest.mark.parametrize(
    "config, flags, fragment",
    [
        ("max_messages_per_trigger = abc", [],
         "--max-messages-per-trigger (key 'max_messages_per_trigger' in {conf}): 'abc' is not a whole number"),
        ("max_messages_per_trigger = 0", [],
         "--max-messages-per-trigger (key 'max_messages_per_trigger' in {conf}): 0 is below 1"),
        ("max_messages_per_trigger = abc", ["--max-messages-per-trigger", "x1"],
         "--max-messages-per-trigger: 'x1' is not a whole number"),
        ("trigger = soon", [],
         "--trigger (key 'trigger' in {conf}): 'soon' is not availableNow or processingTime=<interval>"),
        ("dedupe = some", [], "--dedupe (key 'dedupe' in {conf}): 'some' is not one of"),
    ],
)
def test_a_bad_value_in_the_config_file_names_the_flag_and_the_key(
    config: str, flags: list[str], fragment: str, tmp_path: Path
) -> None:
    conf = write(tmp_path / "j.conf", f"[queue_to_delta]\n{config}\n")
    with pytest.raises(JobConfigError) as failure:
        queue_to_delta_job().parse_args([*REQUIRED_FLAGS, "--config", str(conf), *flags])
    assert fragment.format(conf=conf) in str(failure.value)


def test_a_config_file_that_is_not_ini_is_a_setting_error(tmp_path: Path) -> None:
    conf = write(tmp_path / "j.conf", "trigger = availableNow\n")
    with pytest.raises(JobConfigError, match=f"--config: {conf} is not an INI file"):
        load_config(str(conf), "queue_to_delta")


@pytest.mark.parametrize("job", ["export_backlog", "queue_to_parquet"])
@pytest.mark.parametrize("value, problem", [("abc", "'abc' is not a whole number"), ("0", "0 is below 1")])
def test_a_bad_count_flag_names_the_flag(
    job: str, value: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib

    main = importlib.import_module(f"clustermq.jobs.{job}").main
    assert main([*JOB_FLAGS[job], "--max-messages-per-trigger", value]) == 2
    assert capsys.readouterr().err == (f"{job}: error: argument --max-messages-per-trigger: "
                                       f"{problem}\n")


def test_queue_to_parquet_checks_its_trigger_before_spark() -> None:
    from clustermq.jobs import queue_to_parquet

    with pytest.raises(JobConfigError, match="--trigger: 'soon' is not availableNow"):
        queue_to_parquet.parse_args([*JOB_FLAGS["queue_to_parquet"], "--trigger", "soon"])


@pytest.mark.parametrize(
    "brokers, nodes",
    [
        ("a:1,b:2,c:3", 3),
        ("masterslave:(a:1,b:2)", 1),
        ("masterslave:(a:1,b:2),masterslave:(c:3,d:4),e:5", 3),
    ],
)
def test_export_backlog_counts_a_failover_pair_as_one_node(brokers: str, nodes: int) -> None:
    from clustermq.jobs.export_backlog import node_count

    assert node_count({"brokers": brokers, "queue": "q"}) == nodes


def test_a_commit_lost_to_another_writer_is_told_by_its_delta_condition() -> None:
    """Several queries writing one table retry a batch only when Delta says another writer
    committed first; any other failure (a missing table, a bad schema, a Python error) fails
    the batch at once."""
    from pyspark.errors.exceptions.base import PySparkException

    from clustermq.pipelines.delta_sink import concurrent_commit_condition

    def failure(condition: str) -> PySparkException:
        return PySparkException(message=f"[{condition}] ...", errorClass=condition)

    hinted = "DELTA_CONCURRENT_APPEND.WITH_PARTITION_HINT"
    assert concurrent_commit_condition(failure(hinted)) == hinted
    assert concurrent_commit_condition(failure("DELTA_PROTOCOL_CHANGED")) == "DELTA_PROTOCOL_CHANGED"
    assert concurrent_commit_condition(failure("DELTA_METADATA_CHANGED")) == "DELTA_METADATA_CHANGED"
    assert concurrent_commit_condition(failure("DELTA_TABLE_NOT_FOUND")) is None
    assert concurrent_commit_condition(ValueError("DELTA_CONCURRENT_APPEND")) is None


def test_a_job_reads_or_writes_a_queue_or_a_topic_and_says_which_flag_is_wrong(tmp_path: Path) -> None:
    """``--queue`` or ``--topic`` (from a flag or the config file), never both; a reading job
    reads a topic through ``--subscription``, which a queue refuses; a park queue works beside a
    topic (the writer gets the park queue, not the topic); publish_table writes to a topic."""
    from clustermq.jobs import publish_table

    rest = ["--brokers", "h:1", "--table", "t", "--checkpoint", "c"]
    job = queue_to_delta_job()
    args = job.parse_args(rest + ["--topic", "prices", "--subscription", "to-delta", "--park-queue", "parked"])
    assert args.source == {"topic": "prices", "subscriptionName": "to-delta"}
    assert (args.park.writer_options["queue"], "topic" in args.park.writer_options) == ("parked", False)
    conf = write(tmp_path / "j.conf", "[queue_to_delta]\ntopic = prices\nsubscription = s\n")
    assert job.parse_args(rest + ["--config", str(conf)]).source == {"topic": "prices", "subscriptionName": "s"}
    assert job.parse_args(rest + ["--queue", "q"]).source == {"queue": "q"}
    for extra, fragment in (
        ([], "--queue or --topic is required (or 'queue' or 'topic' in the config file)"),
        (["--queue", "q", "--topic", "t"], "--queue and --topic are both set"),
        (["--queue", "q", "--subscription", "s"], "--subscription applies to --topic, not to --queue"),
    ):
        with pytest.raises(JobConfigError, match=re.escape(fragment)):
            job.parse_args(rest + extra)
    publish = ["--brokers", "h:1", "--input", "i", "--body-col", "b"]
    assert publish_table.parse_args(publish + ["--topic", "prices"]).source == {"topic": "prices"}
    with pytest.raises(JobConfigError, match="unrecognized arguments: --subscription"):
        publish_table.parse_args(publish + ["--topic", "prices", "--subscription", "s"])
