"""The bench's pure parts: what the scale-out step reports and plots from its rows, and the
machine-load probe its rows carry (the step itself runs in ``make bench``; the guarantee it
relies on, two queries into one table exactly once, is ``test_scaleout.py``)."""

from __future__ import annotations

from pathlib import Path

from clustermq.devtools.bench import plots
from clustermq.devtools.bench.probes import MachineLoad
from clustermq.devtools.bench.report import markdown
from clustermq.devtools.bench.scaleout import markdown_section

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


def test_machine_load_is_a_share_of_all_cores() -> None:
    with MachineLoad() as load:
        sum(i * i for i in range(2_000_000))  # some CPU, so the share is measured over real ticks
    assert load.busy_share is not None and 0.0 < load.busy_share <= 1.0
