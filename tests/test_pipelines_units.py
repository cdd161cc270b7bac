"""Fast checks of the pipeline plumbing: job settings, the Delta jar cache, option refusals."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from clustermq.jobs import JobConfigError, load_config, merge_settings, parse_key_values

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
    from clustermq.delta import DeltaJarsMissing, delta_jars, pinned_artifact

    assert pinned_artifact() == ("delta-spark_4.2_2.13", "4.4.0")
    with pytest.raises(DeltaJarsMissing, match="make setup"):
        delta_jars(cache=tmp_path)


def test_jars_pyspark_ships_are_recognised_by_artifact_id(tmp_path: Path) -> None:
    from clustermq.delta import _artifacts_in

    for name in ("scala-library-2.13.18.jar", "zstd-jni-1.5.7-7.jar", "spark-core_2.13-4.2.0.jar"):
        (tmp_path / name).write_bytes(b"")
    assert _artifacts_in(tmp_path) == {"scala-library", "zstd-jni", "spark-core_2.13"}


def test_batch_read_refuses_drain_and_artemis_before_any_task() -> None:
    from clustermq.browse import check_browse_mode
    from clustermq.options import OptionError, ReadOptions

    base = {"brokers": "127.0.0.1:1", "queue": "q"}
    with pytest.raises(OptionError, match="export_backlog.py --mode drain"):
        check_browse_mode(ReadOptions.parse({**base, "mode": "drain"}))
    with pytest.raises(OptionError, match="Artemis cannot browse"):
        check_browse_mode(ReadOptions.parse({**base, "flavor": "artemis"}))
    check_browse_mode(ReadOptions.parse(base))  # browse on classic/auto is fine
