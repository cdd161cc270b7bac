"""A cached tree (broker distribution, Delta jars, Spark home) is made once, never trusted half-made,
and a failed build leaves nothing behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clustermq.paths import COMPLETE_MARKER, build_once, is_complete

REPO = Path(__file__).resolve().parents[1]


def _build_file(text: str, calls: list[Path]):
    def build(work: Path) -> Path:
        calls.append(work)
        tree = work / "tree"
        tree.mkdir()
        (tree / "content.txt").write_text(text)
        return tree

    return build


def test_a_finished_tree_is_built_once_and_then_reused(tmp_path: Path) -> None:
    final = tmp_path / "cache" / "thing-1.0"
    calls: list[Path] = []
    assert build_once(final, _build_file("first", calls), stamp="thing:1.0") == final
    assert (final / "content.txt").read_text() == "first"
    assert (final / COMPLETE_MARKER).read_text() == "thing:1.0\n"
    assert build_once(final, _build_file("second", calls)) == final
    assert (final / "content.txt").read_text() == "first"
    assert len(calls) == 1
    assert sorted(p.name for p in final.parent.iterdir()) == [".thing-1.0.lock", "thing-1.0"]


def test_a_tree_without_the_marker_is_replaced(tmp_path: Path) -> None:
    final = tmp_path / "thing"
    final.mkdir()
    (final / "stale.txt").write_text("left by a process that died")
    assert not is_complete(final)
    build_once(final, _build_file("fresh", []))
    assert sorted(p.name for p in final.iterdir()) == [COMPLETE_MARKER, "content.txt"]
    assert is_complete(final)


def test_a_failed_build_leaves_neither_tree_nor_work_folder(tmp_path: Path) -> None:
    final = tmp_path / "thing"

    def build(work: Path) -> Path:
        (work / "partial.bin").write_bytes(b"x")
        raise RuntimeError("download failed")

    with pytest.raises(RuntimeError, match="download failed"):
        build_once(final, build)
    assert [p.name for p in tmp_path.iterdir()] == [".thing.lock"]


def test_processes_building_at_once_build_one_tree(tmp_path: Path) -> None:
    """Each process records its build in a log; the lock lets exactly one build."""
    log = tmp_path / "builds.log"
    code = (
        "import sys; from pathlib import Path; from clustermq.paths import build_once\n"
        "def build(work):\n"
        f"    with open({str(log)!r}, 'a') as f: f.write('built\\n')\n"
        "    (work / 'x').write_text('x'); return work\n"
        f"print(build_once(Path({str(tmp_path / 'thing')!r}), build))\n"
    )
    env_path = str(REPO / "connector")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
             for _ in range(4)]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 4, outputs
    assert log.read_text() == "built\n"
    assert {out.strip() for out, _ in outputs} == {str(tmp_path / "thing")}
