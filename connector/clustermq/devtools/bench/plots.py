"""The bench's PNG plots: depth and throughput per node for each read run, the batch-size sweep,
memory while draining. The depth plot is where "a node's backlog only falls" is seen: a rising
line is a network shipping a node's messages to another node that also has a reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _throughput_per_node(series: list[Any]) -> dict[str, tuple[list[float], list[float]]]:
    """Messages/s leaving each node between consecutive depth samples."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for (t0, d0), (t1, d1) in zip(series, series[1:]):
        for node, before in d0.items():
            after = d1.get(node)
            if before is None or after is None or t1 <= t0:
                continue
            xs, ys = out.setdefault(node, ([], []))
            xs.append(t1)
            ys.append(max(0.0, (before - after) / (t1 - t0)))
    return out


def _depth_per_node(series: list[Any]) -> dict[str, tuple[list[float], list[float]]]:
    out: dict[str, tuple[list[float], list[float]]] = {}
    for t, depths in series:
        for node, depth in depths.items():
            if depth is not None:
                xs, ys = out.setdefault(node, ([], []))
                xs.append(t)
                ys.append(depth)
    return out


def _per_node_plot(plt: Any, runs: list[dict[str, Any]], curves: Any, ylabel: str, what: str,
                   path: Path) -> Path:
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.6 * len(runs)), squeeze=False)
    for ax, run in zip(axes[:, 0], runs):
        for node, (xs, ys) in sorted(curves(run["depth_series"]).items()):
            ax.plot(xs, ys, label=node)
        ax.set_title(f"[{run.get('flavor', '')}] {run['name']} ({what})", fontsize=9)
        ax.set_ylabel(ylabel)
        if ax.get_lines():
            ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("seconds since start")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def plots(results: dict[str, Any], directory: Path) -> list[Path]:
    """Depth and throughput per node for each read run, the batch-size sweep, memory."""
    # Imported here: matplotlib is the optional ``bench`` extra (the ``clustermq`` command must
    # start without it), and the Agg backend has to be chosen before pyplot is imported.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    runs = [r for r in results["comparisons"] if r.get("depth_series")]
    if runs:
        made.append(_per_node_plot(plt, runs, _depth_per_node, "queue depth",
                                   "queue depth per node, median run", directory / "bench-depth-per-node.png"))
        made.append(_per_node_plot(plt, runs, _throughput_per_node, "messages/s",
                                   "acknowledged: drop in queue depth per node",
                                   directory / "bench-throughput-per-node.png"))
    sweep = results.get("batch_size") or []
    if sweep:
        fig, ax1 = plt.subplots(figsize=(7, 3.5))
        sizes = [r["maxMessagesPerTrigger"] for r in sweep]
        ax1.plot(sizes, [r["messages_per_s"] for r in sweep], marker="o", label="messages/s")
        ax1.set_xscale("log")
        ax1.set_xlabel("maxMessagesPerTrigger")
        ax1.set_ylabel("messages/s")
        ax2 = ax1.twinx()
        ax2.plot(sizes, [r.get("batch_ms_p50") or 0 for r in sweep], "g--", marker="s", label="p50 ms")
        ax2.plot(sizes, [r.get("batch_ms_p95") or 0 for r in sweep], "r:", marker="^", label="p95 ms")
        ax2.set_ylabel("batch duration ms")
        fig.legend(fontsize=8, loc="upper left")
        fig.tight_layout()
        path = directory / "bench-batch-size.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        made.append(path)
    mem = (results.get("memory") or {}).get("memory_series")
    if mem:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        ax.plot([s[0] for s in mem], [s[1] / 1024 for s in mem], label="Spark JVM")
        ax.plot([s[0] for s in mem], [s[2] / 1024 for s in mem], label="reader (Python)")
        ax.set_xlabel("seconds since start")
        ax.set_ylabel("RSS MiB")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = directory / "bench-memory.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        made.append(path)
    scale = results.get("scaleout") or []
    if scale:
        made.append(_scaleout_plot(plt, scale, directory / "bench-scaleout.png"))
    if results.get("latency"):
        made.append(_latency_plot(plt, results["latency"], directory / "bench-latency.png"))
    return made


#: the latency plot's bars, left to right
LATENCY_BARS = (("p50_ms", "p50"), ("p95_ms", "p95"), ("p99_ms", "p99"),
                ("p99_first_ms", "p99, first window"), ("p99_last_ms", "p99, last window"))


def _latency_plot(plt: Any, rows: list[dict[str, Any]], path: Path) -> Path:
    """Per flavor: each query and rate's percentiles as bars, with the goal as a tick."""
    flavors = list(dict.fromkeys(r["flavor"] for r in rows))
    fig, axes = plt.subplots(1, len(flavors), figsize=(5.5 * len(flavors), 3.8), squeeze=False)
    width = 0.8 / len(LATENCY_BARS)
    for ax, flavor in zip(axes[0], flavors):
        runs = [r for r in rows if r["flavor"] == flavor]
        for i, (key, label) in enumerate(LATENCY_BARS):
            xs = [j + (i - (len(LATENCY_BARS) - 1) / 2) * width for j in range(len(runs))]
            ax.bar(xs, [(r[key] or 0) / 1000 for r in runs], width, label=label)
        for j, r in enumerate(runs):
            if r["low_rate"]:
                ax.hlines(r["goal_p99_ms"] / 1000, j - 0.45, j + 0.45, colors="black", linestyles="dashed")
        ax.set_xticks(range(len(runs)), [f"{r['query']}\n{r['rate_share']:.0%} ({r['offered_msgs_per_s']:,.0f}/s)"
                                         for r in runs], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("seconds, producer to commit")
        ax.set_title(f"[{flavor}] latency (dashed: p99 goal at the low rate)", fontsize=9)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _scaleout_plot(plt: Any, rows: list[dict[str, Any]], path: Path) -> Path:
    """Aggregate messages/s of one and two queries per flavor: median bar, range as error bar."""
    flavors = list(dict.fromkeys(r["flavor"] for r in rows))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.35
    for i, queries in enumerate(sorted({r["queries"] for r in rows})):
        picked = [next((r for r in rows if r["flavor"] == f and r["queries"] == queries), None) for f in flavors]
        xs = [j + (i - 0.5) * width for j in range(len(flavors))]
        medians = [r["messages_per_s"] if r else 0 for r in picked]
        errors = [[m - (r["messages_per_s_min"] if r else 0) for m, r in zip(medians, picked)],
                  [(r["messages_per_s_max"] if r else 0) - m for m, r in zip(medians, picked)]]
        ax.bar(xs, medians, width, yerr=errors, capsize=3,
               label=f"{queries} quer{'y' if queries == 1 else 'ies'}")
    ax.set_xticks(range(len(flavors)), flavors)
    ax.set_ylabel("messages/s into one Delta table")
    ax.set_title("queue_to_delta queries on one queue: aggregate rate", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
