"""The reader's two transports side by side: the same backlog read over STOMP and over AMQP.

``transport=amqp`` buys a JMS group's name on Classic and the JMS message id on Artemis with
CPU (proton's per-message cost in the reader, and on Classic the broker's AMQP conversion), so
the README states its price from this step. Each round preloads two equal backlogs and reads
one per transport, alternating which goes first (the machine's load drifts); the report gives
the median ratio and the range. An untimed warm-up read per transport comes first.
"""

from __future__ import annotations

import statistics
from typing import Any

from clustermq.devtools.bench.scenarios import Bench, read_connector
from clustermq.devtools.bench.spread import median_range


def compare_transports(b: Bench, amqp_brokers: str, count: int, max_per_trigger: int,
                       rounds: int = 3) -> dict[str, Any]:
    """``rounds`` × (STOMP read, AMQP read) of ``count`` messages each; rates and ratios."""
    for transport in ("stomp", "amqp"):  # untimed: the first read of a session starts its reader
        queue = b.new_queue(f"transport-warmup-{transport}")
        b.preload(queue, min(count, 500))
        read_connector(b, queue, min(count, 500), max_per_trigger, name=f"warm-up over {transport}",
                       reader_extra=_options(transport, amqp_brokers))
    rows = []
    for i in range(rounds):
        order = ("stomp", "amqp") if i % 2 == 0 else ("amqp", "stomp")
        rates: dict[str, float] = {}
        for transport in order:
            queue = b.new_queue(f"transport-{transport}")
            b.preload(queue, count)
            fig = read_connector(b, queue, count, max_per_trigger, name=f"read over {transport}",
                                 reader_extra=_options(transport, amqp_brokers))
            rates[transport] = fig.rate
            b.say(f"  round {i + 1}: {transport} {fig.rate:,.0f} msg/s"
                  + (f" (stalled with {fig.extra['stalled_with_left']} left)" if "stalled_with_left" in fig.extra else ""))
        rows.append({"round": i + 1, "stomp_msg_s": round(rates["stomp"], 1),
                     "amqp_msg_s": round(rates["amqp"], 1),
                     "amqp_to_stomp": round(rates["amqp"] / rates["stomp"], 3) if rates["stomp"] else None})
    ratios = [float(r["amqp_to_stomp"]) for r in rows if r["amqp_to_stomp"] is not None]
    median, low, high = median_range(ratios) if ratios else (None, None, None)
    return {"messages": count, "maxMessagesPerTrigger": max_per_trigger, "rounds": rows,
            "stomp_msg_s_median": statistics.median(float(r["stomp_msg_s"] or 0) for r in rows),
            "amqp_msg_s_median": statistics.median(float(r["amqp_msg_s"] or 0) for r in rows),
            "ratio_median": median, "ratio_range": [low, high] if ratios else None}


def _options(transport: str, amqp_brokers: str) -> dict[str, str]:
    return {"transport": transport, **({"amqpBrokers": amqp_brokers} if transport == "amqp" else {})}


def markdown_section(per_flavor: dict[str, dict[str, Any]] | None) -> list[str]:
    """The report's lines for :func:`compare_transports`, per flavor (none when it did not run)."""
    if not per_flavor:
        return []
    lines = ["", "## Reader transport: STOMP vs AMQP (`transport=amqp`)", "",
             "Rounds alternate which transport reads first; the same backlog size for both.", "",
             "| flavor | round | STOMP messages/s | AMQP messages/s | AMQP / STOMP |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for flavor, result in per_flavor.items():
        for row in result["rounds"]:
            lines.append(f"| {flavor} | {row['round']} | {row['stomp_msg_s']:,.0f} | "
                         f"{row['amqp_msg_s']:,.0f} | {row['amqp_to_stomp']} |")
    lines.append("")
    for flavor, result in per_flavor.items():
        lo, hi = result["ratio_range"] or (None, None)
        lines.append(f"* {flavor}: {result['messages']:,} messages per read, `maxMessagesPerTrigger` "
                     f"{result['maxMessagesPerTrigger']:,}; median STOMP {result['stomp_msg_s_median']:,.0f} "
                     f"msg/s, AMQP {result['amqp_msg_s_median']:,.0f} msg/s, ratio "
                     f"{result['ratio_median']} (range {lo}-{hi}).")
    return lines
