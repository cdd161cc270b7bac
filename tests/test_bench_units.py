"""The bench's pure parts: what the scale-out and latency steps report and plot from their rows,
the latency percentiles, the median and range every step quotes, and the machine-load probe
(the steps themselves run in ``make bench``; the guarantee the scale-out step relies on, two
queries into one table exactly once, is ``test_scaleout.py``; the paced producer the latency
step uses is tested against a cluster in ``test_localcluster.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustermq.devtools.bench import latency, plots
from clustermq.devtools.bench.latency import BUCKET_MS, Latencies, summary
from clustermq.devtools.bench.probes import MachineLoad
from clustermq.devtools.bench.report import headline, markdown
from clustermq.devtools.bench.scaleout import markdown_section
from clustermq.devtools.bench.spread import median_item, median_range, named_range

ROWS = [
    {"flavor": "classic", "queries": 1, "messages": 60000, "messages_per_s": 2814.0,
     "messages_per_s_min": 1970.0, "messages_per_s_max": 3698.0, "after_first_batch_msgs_per_s": 3714.0,
     "rows_per_query": [60000], "machine_busy_share": 0.97, "cpu_us_per_msg": {"reader": 41.0, "jvm": 150.2}},
    {"flavor": "classic", "queries": 2, "messages": 60000, "messages_per_s": 2449.0,
     "messages_per_s_min": 2376.0, "messages_per_s_max": 3478.0, "after_first_batch_msgs_per_s": 3294.0,
     "rows_per_query": [30060, 29940], "machine_busy_share": 0.99, "cpu_us_per_msg": {"reader": 44.5, "jvm": 160.0},
     "ratio_to_one_query": 0.94, "ratio_to_one_query_min": 0.87, "ratio_to_one_query_max": 1.21,
     "after_first_batch_ratio": 1.02, "after_first_batch_ratio_min": 0.89, "after_first_batch_ratio_max": 1.19},
]


def test_scaleout_rows_become_a_table_with_the_ratio_its_range_and_the_machine_load() -> None:
    lines = markdown_section(ROWS)
    one = next(line for line in lines if line.startswith("| classic | 1 |"))
    two = next(line for line in lines if line.startswith("| classic | 2 |"))
    assert "2,814 (1,970-3,698)" in one and "| 60,000 |" in one and "| 0.97 | 41.0, 150.2 |" in one
    assert "30,060, 29,940" in two and "0.94 (0.87-1.21)" in two and "1.02 (0.89-1.19)" in two
    assert markdown_section(None) == [] and markdown_section([]) == []


def test_the_report_carries_the_scaleout_section_and_its_plot(tmp_path: Path) -> None:
    results = {"environment": {"date": "2026-01-01", "machine": "m", "scale": 0.3, "messages": 60000},
               "comparisons": [], "scaling": [], "batch_size": [], "notes": [], "scaleout": ROWS}
    made = plots.plots(results, tmp_path)
    assert [p.name for p in made] == ["bench-scaleout.png"] and made[0].stat().st_size > 1000
    text = markdown(results, [p.name for p in made])
    assert "## Scaling past one driver" in text and "](bench-scaleout.png)" in text


def test_the_throughput_cpu_table_counts_the_brokers_and_the_sum() -> None:
    """A run's CPU per message by process class, the brokers' included, and their sum: what the
    machine spends per message, which bounds the rate on a busy machine."""
    results = {"environment": {"date": "2026-01-01", "machine": "m", "scale": 0.3, "messages": 60000},
               "comparisons": [{"flavor": "classic", "name": "read: queue_to_delta -> Delta table",
                                "messages": 60000, "seconds": 8.4, "messages_per_s": 7134.0,
                                "cpu_us_per_msg": {"driver": 2.0, "reader": 37.0, "workers": 7.0,
                                                   "jvm": 113.0, "brokers": 41.0}}],
               "scaling": [], "batch_size": [], "notes": []}
    text = markdown(results, [])
    assert "| run | driver | reader | workers | JVM | brokers | all |" in text
    assert "| read: queue_to_delta -> Delta table | 2 | 37 | 7 | 113 | 41 | 200 |" in text, text


def test_machine_load_is_a_share_of_all_cores() -> None:
    with MachineLoad() as load:
        sum(i * i for i in range(2_000_000))  # some CPU, so the share is measured over real ticks
    assert load.busy_share is not None and 0.0 < load.busy_share <= 1.0


def test_the_median_run_is_one_that_happened_and_the_range_spans_the_runs() -> None:
    runs = [{"rate": 3.0}, {"rate": 1.0}, {"rate": 4.0}, {"rate": 2.0}]
    assert median_item(runs, key=lambda r: r["rate"]) == {"rate": 2.0}  # the lower middle of four
    assert median_range([1.0, 1.2345, 0.5]) == (1.0, 0.5, 1.234)
    assert named_range("ratio", [2.0, 1.0, 3.0]) == {"ratio": 2.0, "ratio_min": 1.0, "ratio_max": 3.0}
    assert named_range("ratio", []) == {}


def test_latency_percentiles_weigh_each_bucket_by_its_messages_and_split_the_windows() -> None:
    lat = Latencies()
    # 98 messages sent in bucket 100 (1,005 ms), committed at 1,505 ms: 500 ms each
    lat.add([(100, 98)], committed_ms=1505.0)
    # 2 late ones sent at 3,005 ms and committed at 6,005 ms: 3,000 ms
    lat.add([(300, 2)], committed_ms=6005.0)
    assert lat.messages == 100
    assert lat.percentile(0.5) == 500.0 and lat.percentile(0.98) == 500.0
    assert lat.percentile(0.99) == 3000.0
    row = summary(lat, sent_from_ms=1000.0, sent_to_ms=3010.0)
    assert (row["p99_first_ms"], row["p99_last_ms"]) == (500.0, 3000.0)
    assert row["window_s"] == 0.7
    assert Latencies().percentile(0.99) is None
    assert BUCKET_MS == 10  # the resolution the docs quote
    assert lat.since(2000.0).messages == 2 and lat.since(1000.0).messages == 100


def test_the_reader_query_counts_a_batch_as_committed_only_once_spark_reported_its_progress() -> None:
    """``foreachBatch`` runs before Spark commits the batch: a query stopped as soon as the rows
    it saw reach the target would leave the last batch without an end time, and its messages
    counted as never committed (the percentiles then lower bounds)."""
    counter = latency._BatchCounter()
    assert counter.committed(lambda: {0}) == 0
    counter.rows.update({0: 5000, 1: 4800, 2: 2269})  # batch 2 seen by foreachBatch, not reported
    asked: list[int] = []
    assert counter.committed(lambda: asked.append(1) or {0, 1}) == 9800
    assert counter.committed(lambda: {0, 1, 2}) == 12069 and asked == [1]


LATENCY_ROWS = [
    {"flavor": "classic", "query": q, "offered_msgs_per_s": rate, "rate_share": share, "sent_msgs_per_s": rate,
     "p50_ms": 700.0, "p95_ms": 1200.0, "p99_ms": p99, "p99_first_ms": p99, "p99_last_ms": p99,
     "window_s": 20.0, "batch_ms_p50": 900, "batch_ms_max": 1400, "goal_p99_ms": latency.GOALS_MS[q], "low_rate": share == 0.25, "messages": 1,
     "machine_busy_share": 0.62, "cpu_us_per_msg": {"driver": 14.0, "jvm": 20.5, "reader": 37.0, "workers": 6.0, "brokers": 88.0}}
    for share, rate in ((0.25, 6000.0), (0.5, 12000.0))
    for q, p99 in (("reader", 1500.0), ("queue_to_delta", 3100.0))
]


def test_the_latency_rows_become_a_table_a_plot_and_a_headline_part(tmp_path: Path) -> None:
    lines = latency.markdown_section(LATENCY_ROWS)
    reader = next(line for line in lines if line.startswith("| classic | reader | 6,000 (25%)"))
    assert "| 700 | 1,200 | 1,500 | 1,500 / 1,500 (20.0) | 2,500 | 900 / 1,400 | 0.62 | 37.0, 20.5, 14.0, 88.0 |" in reader
    assert latency.markdown_section(None) == []
    results = {"environment": {"date": "2026-01-01", "machine": "m", "scale": 1.0, "messages": 1,
                               "flavors": ["classic"]},
               "comparisons": [], "scaling": [], "batch_size": [], "notes": [], "latency": LATENCY_ROWS}
    made = plots.plots(results, tmp_path)
    assert [p.name for p in made] == ["bench-latency.png"] and made[0].stat().st_size > 1000
    assert "## Latency" in markdown(results, [p.name for p in made])
    assert "latency p99 at a quarter of the raw rate reader 1.5 s, queue_to_delta 3.1 s" in headline(results)


@pytest.mark.parametrize("rate", [0.0, -5.0])
def test_a_paced_producer_needs_a_positive_rate(rate: float) -> None:
    from clustermq.devtools.loadgen import LoadSpec

    with pytest.raises(ValueError, match="rate must be a positive number"):
        LoadSpec(count=1, rate=rate)


@pytest.mark.parametrize("rate", ["0", "-1", "fast"])
def test_the_produce_command_refuses_a_rate_that_is_not_positive(rate: str, capsys: pytest.CaptureFixture[str]) -> None:
    from clustermq.devtools.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["produce", "--queue", "q", "--rate", rate])
    assert f"--rate must be a positive number of messages per second, got '{rate}'" in capsys.readouterr().err


@pytest.mark.parametrize(("option", "unit"), [("--latency-seconds", "seconds"), ("--memory-messages", "messages")])
@pytest.mark.parametrize("value", ["0", "-3", "soon"])
def test_the_bench_refuses_sizes_that_are_not_positive(
    option: str, unit: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from clustermq.devtools.bench.run import parse_args

    with pytest.raises(SystemExit):
        parse_args([option, value])
    assert f"{option} must be a positive number of {unit}, got '{value}'" in capsys.readouterr().err
    assert parse_args([option, "7"]).__dict__[option[2:].replace("-", "_")] == 7
