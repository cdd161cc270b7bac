"""The README's option table and the code's option list must agree, row for row."""

from __future__ import annotations

import re
from pathlib import Path

from clustermq.options import OPTIONS

README = Path(__file__).resolve().parents[1] / "README.md"


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
    return "(required)" if "Required." in meaning else "(none)"


def test_every_option_is_documented_with_its_default_and_meaning() -> None:
    expected = [(o.name, documented_default(o.display_default, o.meaning), o.meaning) for o in OPTIONS]
    assert readme_rows() == expected


def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)
    assert "`make test`" in README.read_text()
