"""Run chosen tests N times in a row and report each test's pass rate and duration.

    .venv/bin/python scripts/flake.py --runs 20 --load tests/test_pairs.py -k killed
    make flake TESTS="tests/test_pairs.py" RUNS=20 LOAD=1

A flaky test is a bug: this measures how often each test passes with the suite's own fixtures
(one pytest process per run), optionally with a process that keeps one core busy, the way
``make test``'s second worker or a shared CI machine loads it. Nothing is rerun to make it
pass: every run counts.
Each run's JUnit XML and output stay in ``--out`` for the failures' post-mortem; the summary is
printed and written there as ``flake.md`` (the format of docs/reliability.md's pass-rate table).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Record:
    """One test's outcomes over the runs, in run order."""

    outcomes: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return self.outcomes.count("passed")


def busy_core(stop_at: float) -> None:
    """Spin until ``stop_at``: one core's worth of load, bounded in time."""
    x = 0
    while time.monotonic() < stop_at:
        x = (x * 31 + 7) % 1_000_003


def outcomes_of(junit: Path) -> dict[str, tuple[str, float]]:
    """``{test id: (outcome, seconds)}`` from a JUnit XML report."""
    results: dict[str, tuple[str, float]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        results[name] = (outcome, float(case.get("time") or 0.0))
    return results


def table(records: dict[str, Record], runs: int, loaded: bool) -> str:
    lines = [
        f"{runs} runs, {'one core kept busy' if loaded else 'no extra load'}:",
        "",
        "| test | passed | median s | min–max s |",
        "| --- | --- | --- | --- |",
    ]
    for name, rec in sorted(records.items()):
        secs = rec.seconds or [0.0]
        lines.append(
            f"| `{name}` | {rec.passed}/{len(rec.outcomes)} | {statistics.median(secs):.1f} "
            f"| {min(secs):.1f}–{max(secs):.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10, help="pytest runs in a row (default 10)")
    p.add_argument("--load", action="store_true", help="keep one core busy during every run")
    p.add_argument("--out", type=Path, default=ROOT / ".cache" / "flake", help="reports and logs")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="tests and pytest options, e.g. tests/test_pairs.py -k killed")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs: at least 1")
    if not args.pytest_args:
        p.error("name the tests to run, e.g. tests/test_pairs.py")
    args.out.mkdir(parents=True, exist_ok=True)
    records: dict[str, Record] = defaultdict(Record)
    for run in range(1, args.runs + 1):
        junit = args.out / f"run{run:03}.xml"
        log = args.out / f"run{run:03}.log"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
               f"--basetemp={args.out / f'tmp{run:03}'}", *args.pytest_args]
        loader = None
        started = time.monotonic()
        if args.load:
            loader = multiprocessing.Process(target=busy_core, args=(started + 6 * 3600,), daemon=True)
            loader.start()
        try:
            with open(log, "w") as out:
                code = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
        finally:
            if loader is not None:
                loader.terminate()
                loader.join()
        took = time.monotonic() - started
        if not junit.is_file():
            print(f"run {run}/{args.runs}: pytest exited {code} without a report; see {log}", flush=True)
            continue
        results = outcomes_of(junit)
        for name, (outcome, secs) in results.items():
            records[name].outcomes.append(outcome)
            records[name].seconds.append(secs)
        failed = sorted(n for n, (o, _) in results.items() if o == "failed")
        print(f"run {run}/{args.runs}: {len(results) - len(failed)}/{len(results)} passed in {took:.0f} s"
              + (f"; failed: {', '.join(failed)} (log {log})" if failed else ""), flush=True)
    report = table(records, args.runs, args.load)
    (args.out / "flake.md").write_text(report + "\n")
    print(report)
    return 0 if all(r.passed == len(r.outcomes) for r in records.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
