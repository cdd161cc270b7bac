"""The README is the user guide: its option table equals the code's, its first screen starts a
newcomer off, its example runs, and it stays a guide (short, in a fixed order) rather than a lab
notebook."""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from clustermq.options import OPTIONS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from clustermq.devtools.localcluster import LocalCluster

README = Path(__file__).resolve().parents[1] / "README.md"
#: what fits on one screen: the newcomer's commands and example must be there without scrolling
FIRST_SCREEN_LINES = 40
MAX_README_LINES = 350
#: the order of Spark's Kafka integration guide, then the reference parts
SECTIONS = [
    "Quick start", "Install", "Reading", "Schema", "Options", "Writing", "Delivery guarantees",
    "Deploying", "Security", "Monitoring", "Troubleshooting", "Compatibility", "Errors", "Jobs",
    "Developing",
]
#: where ``clustermq cluster up`` keeps the local cluster's state, as the first screen says
LOCAL_CLUSTER_JSON = ".cache/clustermq/cluster/cluster.json"


def readme_rows() -> list[tuple[str, str, str]]:
    text = README.read_text()
    table = text.split("<!-- options-table:start -->")[1].split("<!-- options-table:end -->")[0]
    rows = []
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((cells[0].strip("`"), cells[1].strip("`"), cells[2]))
    return rows


def documented_default(default: str | None, meaning: str) -> str:
    if default is not None:
        return default
    return "(required)" if re.search(r"\bRequired[.;]", meaning) else "(none)"


def first_screen() -> str:
    return "\n".join(README.read_text().splitlines()[:FIRST_SCREEN_LINES])


def first_screen_python() -> str:
    """The first screen's PySpark example (the first complete ``python`` block in it)."""
    blocks = re.findall(r"^```python\n(.*?)^```$", first_screen(), re.M | re.S)
    assert blocks, f"no complete python code block in the README's first {FIRST_SCREEN_LINES} lines"
    return str(blocks[0])


def test_every_option_is_documented_with_its_default_and_meaning() -> None:
    expected = [(o.name, documented_default(o.display_default, o.meaning), o.meaning) for o in OPTIONS]
    assert readme_rows() == expected


def test_the_options_prose_names_the_reading_only_options() -> None:
    """The sentence before the table says which options apply to reading only; the code decides."""
    text = README.read_text()
    prose = text.split("## Options")[1].split("<!-- options-table:start -->")[0]
    listed = re.search(r"Reading only: (.*?)\.\s", " ".join(prose.split()))
    assert listed, "the Options section does not list the reading-only options"
    assert re.findall(r"`(\w+)`", listed.group(1)) == [o.name for o in OPTIONS if o.applies_to == "read"]


def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)
    assert "`make test`" in README.read_text()


def test_the_first_screen_has_the_quick_start_and_an_example() -> None:
    screen = first_screen()
    assert "## Quick start" in screen
    assert re.search(r"^make demo\b", screen, re.M) and re.search(r"^make test\b", screen, re.M)
    assert "clustermq cluster up" in screen
    assert 'format("clustermq")' in first_screen_python()


def test_the_first_screen_points_at_the_cluster_file_cluster_up_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    from clustermq.devtools.localcluster.harness_paths import default_cluster_dir
    from clustermq.devtools.localcluster.state import STATE_FILE

    monkeypatch.delenv("CLUSTERMQ_CACHE", raising=False)
    written = (default_cluster_dir() / STATE_FILE).relative_to(README.parent)
    assert str(written) == LOCAL_CLUSTER_JSON
    assert LOCAL_CLUSTER_JSON in first_screen_python()


def test_the_readme_is_a_guide_of_bounded_length() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


def test_the_sections_follow_the_guide_order() -> None:
    headings = re.findall(r"^## (.+)$", README.read_text(), re.M)
    assert headings == SECTIONS


def test_the_bench_headline_is_at_most_three_lines() -> None:
    from clustermq.devtools.bench.report import HEADLINE_END, HEADLINE_MAX_LINES, HEADLINE_START

    block = README.read_text().split(HEADLINE_START)[1].split(HEADLINE_END)[0]
    lines = [line for line in block.splitlines() if line.strip()]
    assert 0 < len(lines) <= HEADLINE_MAX_LINES == 3


def test_the_headline_generator_writes_at_most_three_lines() -> None:
    from clustermq.devtools.bench.report import HEADLINE_MAX_LINES, headline

    env = {"date": "2026-01-01", "machine": "m", "scale": 1, "repeats": 3,
           "flavors": ["classic", "artemis", "third"]}
    rows = [{"flavor": f, "name": name, "ratio_to_raw": ratio, "after_first_batch_ratio": after}
            for f in env["flavors"]
            for name, ratio, after in [("read: raw stomp.py consumers", 1.0, None),
                                       ("read: clustermq reader -> noop", 0.5, 1.2),
                                       ("write: clustermq writer", 0.3, None),
                                       ("read: Python source, no broker -> noop", 1.3, 2.0)]]
    text = headline({"environment": env, "comparisons": rows})
    assert len(text.splitlines()) <= HEADLINE_MAX_LINES
    assert "reader -> noop 0.50× (1.20× after its first batch)" in text and "no broker" not in text
    assert "docs/benchmarks.md" in text


@pytest.mark.cluster
@pytest.mark.spark
def test_the_first_screen_example_reads_what_was_produced(
    spark: SparkSession, cluster: LocalCluster, broker, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run the example as the README tells a newcomer to: ``BROKERS`` from ``cluster up``'s last
    line (the cluster's ``brokers`` string), the login from the cluster's ``cluster.json``; only
    the cluster directory and the queue and view names are this test's own. The Monitoring
    section's listener watches the same query: its lag must name every node."""
    code = first_screen_python()
    tag = uuid.uuid4().hex[:8]
    queue, view = f"readme.orders.{tag}", f"readme_orders_{tag}"
    substitutions = {
        f'"{LOCAL_CLUSTER_JSON}"': repr(str(cluster.dir / "cluster.json")),
        'queue="orders"': f'queue="{queue}"',
        'queryName("orders")': f'queryName("{view}")',
        "FROM orders": f"FROM {view}",
    }
    for old, new in substitutions.items():
        assert old in code, f"the README example no longer contains {old}"
        code = code.replace(old, new)
    monkeypatch.setenv("BROKERS", cluster.brokers)
    produced = broker.produce(queue, 600, groups=10)
    assert sum(produced.values()) == 600
    listener = monitoring_listener(spark)
    try:
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
        row = spark.sql(f"SELECT count(*) AS n, count(DISTINCT message_id) AS ids FROM {view}").first()
        assert (row.n, row.ids) == (600, 600)
        assert all(d == 0 for d in broker.wait_depth_zero(queue).values())
        # the Monitoring section's listener saw the reader's lag for every node
        deadline = time.monotonic() + 30
        while not {n.name for n in cluster.nodes()} <= set(listener.nodes) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert {n.name for n in cluster.nodes()} <= set(listener.nodes), listener.nodes
    finally:
        spark.streams.removeListener(listener)


def monitoring_listener(spark: SparkSession) -> Any:
    """The Monitoring section's listener, registered on ``spark``, recording the nodes it printed."""
    text = README.read_text().split("## Monitoring")[1].split("\n## ")[0]
    code = re.findall(r"^```python\n(.*?)^```$", text, re.M | re.S)[0]
    registration = "spark.streams.addListener(Lag())"
    assert registration in code, "the Monitoring example no longer registers Lag()"
    namespace: dict[str, Any] = {"spark": spark, "__name__": "readme_monitoring"}
    exec(compile(code.replace(registration, ""), str(README), "exec"), namespace)

    class Recording(namespace["Lag"]):  # type: ignore[misc]  # a class the README defines
        def __init__(self) -> None:
            super().__init__()
            self.nodes: list[str] = []

        def onQueryProgress(self, event: Any) -> None:
            super().onQueryProgress(event)
            for source in event.progress.sources:
                self.nodes.extend(json.loads(source.latestOffset or "{}"))

    listener = Recording()
    spark.streams.addListener(listener)
    return listener
