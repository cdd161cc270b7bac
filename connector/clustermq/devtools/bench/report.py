"""The benchmark's outputs: one JSON of every figure, a Markdown table, and PNG plots.

Ratios are always against the raw client measured in the same run, never against numbers from
another machine or another day.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clustermq.devtools.bench import latency, scaleout, transport


def ratio(value: float, baseline: float) -> float | None:
    return round(value / baseline, 3) if baseline > 0 else None


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _median_range(median: Any, low: Any, high: Any) -> str:
    """A median ratio, with its min–max when the runs differ."""
    if median is None:
        return "—"
    text = _fmt(median, 2)
    if low is not None and low != high:
        text += f" ({_fmt(low, 2)}–{_fmt(high, 2)})"
    return text


def _ratio_text(row: dict[str, Any]) -> str:
    several = row.get("repeats", 1) > 1
    return _median_range(row.get("ratio_to_raw"), row.get("ratio_min") if several else None,
                         row.get("ratio_max"))


def _after_first_text(row: dict[str, Any]) -> str:
    return _median_range(row.get("after_first_batch_ratio"), row.get("after_first_batch_ratio_min"),
                         row.get("after_first_batch_ratio_max"))


def _cpu_text(row: dict[str, Any], key: str) -> str:
    return _fmt((row.get("cpu_us_per_msg") or {}).get(key))


#: rows of the floor scenario (bench/floor.py) start with this
FLOOR_PREFIX = "read: Python source, no broker"
_FLOOR_NOTE = (
    " *Python source, no broker*: the reader's rows (its schema, its row and partition code, the "
    "same batch limit and sink) served from memory by a source that asks no broker: what Spark "
    "itself takes for these rows."
)


def comparison_tables(results: dict[str, Any]) -> list[str]:
    """Per flavor: throughput with the ratio's median (min–max), then CPU per message."""
    env = results["environment"]
    lines: list[str] = []
    for flavor in env.get("flavors") or sorted({r["flavor"] for r in results["comparisons"]}):
        rows = [r for r in results["comparisons"] if r.get("flavor") == flavor]
        if not rows:
            continue
        lines += [
            "", f"## {flavor}: throughput against the raw client", "",
            f"Median of {env.get('repeats', 1)} alternating runs (baseline, candidate, ...); the ratio is "
            "the median of the per-run ratios, with min–max. First batch: seconds from the query's "
            "start to the end of its first batch that read something. Depth rise: the most messages "
            "any node's queue depth *gained* during the run (0: every node's depth only fell). "
            "After the first batch: the query's rate from the end of its first batch to the end of "
            "its last, against the raw client's whole run; the gap to the ratio is the query's "
            "start, paid once by a long-running query." + (_FLOOR_NOTE if any(
                r["name"].startswith(FLOOR_PREFIX) for r in rows) else ""),
            "",
            "| run | messages | seconds | messages/s | ratio to raw | after the first batch "
            "| first batch s | batch p95 ms | depth rise | stalled, messages left |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in rows:
            lines.append(
                f"| {row['name']} | {_fmt(row['messages'])} | {_fmt(row['seconds'], 1)} | "
                f"{_fmt(row['messages_per_s'])} | {_ratio_text(row)} | {_after_first_text(row)} | "
                f"{_fmt(row.get('first_batch_s'), 1)} | "
                f"{_fmt(row.get('batch_ms_p95'))} | {_fmt(row.get('depth_rise_max'))} | "
                f"{_fmt(row.get('stalled_with_left'))} |")
        lines += [
            "", f"CPU per message ({flavor}, µs, median of the runs): *driver* is the bench's own "
            "process (the raw clients and the load generator run there), *reader* the Python process "
            "Spark starts for the streaming source (it holds the reader's connections), *workers* "
            "every other Python process under the Spark JVM (the executors' workers, and the "
            "driver-side Python runner of a write's commit, where the move out of staging runs), "
            "*JVM* the Spark JVM, *brokers* the local cluster's nodes (busy even for a run that does "
            "not use them), *all* their sum. On a machine the run keeps busy, its rate cannot pass "
            "the cores' microseconds a second divided by *all*.",
            "",
            "| run | driver | reader | workers | JVM | brokers | all |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in rows:
            cpu = row.get("cpu_us_per_msg") or {}
            lines.append(f"| {row['name']} | {_cpu_text(row, 'driver')} | {_cpu_text(row, 'reader')} | "
                         f"{_cpu_text(row, 'workers')} | {_cpu_text(row, 'jvm')} | "
                         f"{_cpu_text(row, 'brokers')} | {_fmt(sum(cpu.values()) if cpu else None)} |")
    return lines


def markdown(results: dict[str, Any], images: list[str]) -> str:
    """The tables of ``docs/benchmarks.md`` (the README's headline summarises their ratios)."""
    env = results["environment"]
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `make bench` on {env['date']} — {env['machine']}; "
        f"{env.get('nodes', 3)}-node local clusters ({', '.join(env.get('flavors', []))}); scale "
        f"{env['scale']} ({env['messages']:,} messages of {env.get('body_size', 256)} bytes, "
        f"{env.get('groups', 1000):,} groups, persistent). Every ratio is against the raw stomp.py "
        f"client measured in the same run. The whole run took {env.get('seconds', 0) / 60:.1f} min.",
    ]
    lines += comparison_tables(results)
    extras = results.get("extras_flavor", "")
    if results["scaling"]:
        lines += ["", f"## Reader scaling with the number of nodes ({extras}, one run)", "",
                  "| nodes | messages | messages/s | ratio to 1 node |", "| ---: | ---: | ---: | ---: |"]
    for row in results["scaling"]:
        lines.append(f"| {row['nodes']} | {_fmt(row['messages'])} | {_fmt(row['messages_per_s'])} | "
                     f"{_fmt(row.get('ratio_to_one_node'), 2)} |")
    if results["batch_size"]:
        lines += ["", f"## Batch size (`maxMessagesPerTrigger`, {extras}, one run each)", "",
                  "| maxMessagesPerTrigger | messages/s | batches | batch p50 ms | batch p95 ms |",
                  "| ---: | ---: | ---: | ---: | ---: |"]
    for row in results["batch_size"]:
        lines.append(f"| {_fmt(row['maxMessagesPerTrigger'])} | {_fmt(row['messages_per_s'])} | "
                     f"{_fmt(row.get('batches'))} | {_fmt(row.get('batch_ms_p50'))} | "
                     f"{_fmt(row.get('batch_ms_p95'))} |")
    mem = results.get("memory") or {}
    if mem:
        lines += [
            "", f"## Memory while draining a large backlog ({extras})", "",
            f"{_fmt(mem['messages'])} messages, `maxMessagesPerTrigger` "
            f"{_fmt(mem['maxMessagesPerTrigger'])}, {_fmt(mem['messages_per_s'])} messages/s.",
            "",
            "| process | peak RSS MiB | peak in first fifth | peak in last fifth |",
            "| --- | ---: | ---: | ---: |",
            f"| reader (Python streaming-source process) | {_fmt(mem.get('peak_rss_reader_mib'), 1)} | "
            f"{_fmt(mem.get('reader_rss_mib_first_fifth'), 1)} | {_fmt(mem.get('reader_rss_mib_last_fifth'), 1)} |",
            f"| Spark JVM | {_fmt(mem.get('peak_rss_jvm_mib'), 1)} | "
            f"{_fmt(mem.get('jvm_rss_mib_first_fifth'), 1)} | {_fmt(mem.get('jvm_rss_mib_last_fifth'), 1)} |",
        ]
    lines += transport.markdown_section(results.get("transport"))
    lines += scaleout.markdown_section(results.get("scaleout"))
    lines += latency.markdown_section(results.get("latency"))
    if results.get("notes"):
        lines += ["", "## Notes", ""] + [f"* {n}" for n in results["notes"]]
    if images:
        lines += ["", "## Plots", ""] + [f"![{Path(i).stem}]({i})" for i in images]
    return "\n".join(lines) + "\n"


HEADLINE_START, HEADLINE_END = "<!-- bench:headline -->", "<!-- /bench:headline -->"
#: The README quotes a summary only: a reader deciding whether to use the connector needs the
#: order of magnitude, and the full tables (CPU, first batch, ranges) live in the linked page.
HEADLINE_MAX_LINES = 3
HEADLINE_DOC = "docs/benchmarks.md"


def _headline_part(row: dict[str, Any]) -> str:
    """``writer 0.28×`` or, for a read, ``reader -> noop 0.45× (1.26× after its first batch)``."""
    name = row["name"].split(": ", 1)[-1].removeprefix("clustermq ")
    text = f"{name} {_fmt(row['ratio_to_raw'], 2)}×"
    if row.get("after_first_batch_ratio") is not None:
        text += f" ({_fmt(row['after_first_batch_ratio'], 2)}× after its first batch)"
    return text


def headline(results: dict[str, Any]) -> str:
    """At most :data:`HEADLINE_MAX_LINES` lines: what was measured where, then one line per flavor
    with each connector run's median ratio to the raw client in the same run.

    The runs without a broker (:data:`FLOOR_PREFIX`) are Spark's own floor, not the connector's
    cost, so only the full tables show them.
    """
    env = results["environment"]
    lines = [f"Measured by `make bench` on {env['date']} ({env['machine']}, scale {env['scale']}, "
             f"median of {env.get('repeats', 1)} alternating runs): throughput against the raw "
             f"stomp.py client, all figures in [{HEADLINE_DOC}]({HEADLINE_DOC})."]
    for flavor in env.get("flavors", []):
        parts = [_headline_part(row) for row in results["comparisons"]
                 if row.get("flavor") == flavor and row.get("ratio_to_raw") not in (None, 1.0)
                 and not row["name"].startswith(FLOOR_PREFIX)]
        low = [r for r in results.get("latency") or [] if r["flavor"] == flavor and r["low_rate"]]
        if low:
            parts.append("latency p99 at a quarter of the raw rate " + ", ".join(
                f"{r['query']} {_fmt(r['p99_ms'] / 1000, 1)} s" for r in low))
        if parts:
            lines.append(f"* {flavor}: " + "; ".join(parts) + ".")
    return "\n".join(lines[:HEADLINE_MAX_LINES])


def refresh_headline(path: Path, results: dict[str, Any]) -> None:
    """Replace the text between the bench markers of ``path`` (a README) with :func:`headline`."""
    text = path.read_text(encoding="utf-8")
    start, end = text.find(HEADLINE_START), text.find(HEADLINE_END)
    if start < 0 or end < start:
        raise SystemExit(f"{path} has no {HEADLINE_START} ... {HEADLINE_END} markers")
    text = text[: start + len(HEADLINE_START)] + "\n" + headline(results) + "\n" + text[end:]
    path.write_text(text, encoding="utf-8")
