"""The pinned Delta Lake jars: fetched once, then only located.

delta-spark's Python package carries no jars: its helper and ``--packages`` make Spark resolve
and download them at start, which needs Maven Central at that moment. This module is the route
for machines without it: the jars are resolved once, with the machine's Maven client, from the
pinned ``conf/delta/pom.xml`` into the git-ignored cache (``make setup`` does it, and the test
suite's sessions use it), and only ever read from there.

Run ``python -m clustermq.pipelines.delta_jars`` to fetch (idempotent; prints the jar folder);
with ``--jars`` it prints the value for ``spark-submit --jars`` instead. This is the route for
machines without Maven access at job start; ``--packages`` and delta-spark's pip helper are the
others (:mod:`clustermq.pipelines.delta_session`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from clustermq.errors import DeltaJarsMissing
from clustermq.paths import COMPLETE_MARKER, cache_dir, conf_dir, exclusive_lock

MANIFEST = "MANIFEST.txt"


def pom_path() -> Path:
    """``conf/delta/pom.xml``: the one place the Delta version is pinned."""
    return conf_dir() / "delta" / "pom.xml"


def pinned_artifact(pom: Path | None = None) -> tuple[str, str]:
    """(artifactId, version) of the Delta dependency the pom pins, e.g. ("delta-spark_4.2_2.13", "4.4.0")."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.parse(pom or pom_path()).getroot()
    version = root.findtext("m:properties/m:delta.version", namespaces=ns)
    for dep in root.findall("m:dependencies/m:dependency", ns):
        if dep.findtext("m:groupId", namespaces=ns) == "io.delta":
            artifact = dep.findtext("m:artifactId", namespaces=ns)
            if artifact and version:
                return artifact, version
    raise RuntimeError(f"{pom or pom_path()} pins no io.delta dependency with a delta.version")


def jar_dir(cache: Path | None = None) -> Path:
    """Where the jars of the pinned Delta version live (one folder per version)."""
    artifact, version = pinned_artifact()
    return (cache or cache_dir()) / "delta" / f"{artifact}-{version}"


def spark_jars_dir() -> Path:
    """The jars pyspark itself runs with (what the Delta jars must not duplicate).

    Found without importing pyspark: fetching the jars needs neither a JVM nor Spark's modules.
    """
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home) / "jars"
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyspark is not installed in this interpreter")
    return Path(next(iter(spec.submodule_search_locations))).resolve() / "jars"


def delta_jars(cache: Path | None = None) -> list[Path]:
    """The cached Delta jars; raises :class:`DeltaJarsMissing` (naming ``make setup``) if absent."""
    folder = jar_dir(cache)
    if not (folder / COMPLETE_MARKER).is_file():
        artifact, version = pinned_artifact()
        raise DeltaJarsMissing(
            f"the Delta jars (io.delta:{artifact}:{version}) are not in {folder}; run "
            "`make setup` (or `python -m clustermq.pipelines.delta_jars`) once: SparkSessions never "
            "download them at start"
        )
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise DeltaJarsMissing(f"{folder} holds no jars; delete it and run `make setup`")
    return jars


def ensure_delta_jars(
    cache: Path | None = None, progress: Callable[[str], None] | None = None
) -> list[Path]:
    """Fetch the pinned Delta jars with Maven unless cached; safe to run from several processes."""
    folder = jar_dir(cache)
    if (folder / COMPLETE_MARKER).is_file():
        return delta_jars(cache)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(folder.parent / f".{folder.name}.lock"):
        if (folder / COMPLETE_MARKER).is_file():
            return delta_jars(cache)
        if progress:
            progress(f"resolving {pom_path()} with Maven")
        resolved = _maven_runtime_dependencies(pom_path())
        shipped = artifacts_in(spark_jars_dir())
        work = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            lines = []
            for coords, path in resolved:
                artifact_id = coords.split(":")[1]
                if artifact_id in shipped:
                    lines.append(f"skipped (pyspark ships {artifact_id})  {coords}")
                    continue
                shutil.copy2(path, work / path.name)
                lines.append(f"included  {coords}")
            (work / MANIFEST).write_text("\n".join(sorted(lines)) + "\n")
            (work / COMPLETE_MARKER).write_text(f"{pinned_artifact()}\n")
            if folder.exists():  # a folder without the marker: unfinished, not trusted
                shutil.rmtree(folder)
            os.rename(work, folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if progress:
            progress(f"Delta jars in {folder}")
    return delta_jars(cache)


def artifacts_in(jars: Path) -> set[str]:
    """Artifact ids of the jars in a folder (file names are ``<artifactId>-<version>.jar``)."""
    names = set()
    for jar in jars.glob("*.jar"):
        match = re.match(r"^(.+?)-\d", jar.name)
        if match:
            names.add(match.group(1))
    return names


def _maven_runtime_dependencies(pom: Path) -> list[tuple[str, Path]]:
    """Resolve ``pom``'s runtime dependencies; return (coordinates, file in ~/.m2) pairs."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven ('mvn') is not on PATH; it is needed once to fetch the Delta jars")
    with tempfile.TemporaryDirectory(prefix="clustermq-delta-") as tmp:
        listing = Path(tmp) / "dependencies.txt"
        cmd = [
            mvn, "-q", "-B", "-f", str(pom), "dependency:list",
            "-DincludeScope=runtime", "-DoutputAbsoluteArtifactFilename=true",
            f"-DoutputFile={listing}",
        ]
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0 or not listing.is_file():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
            raise RuntimeError(f"'{' '.join(cmd)}' failed (exit {proc.returncode}):\n{tail}")
        result = []
        for line in listing.read_text().splitlines():
            parts = line.strip().split(":")
            # group:artifact:type[:classifier]:version:scope:/abs/path
            if len(parts) < 6 or not parts[-1].endswith(".jar"):
                continue
            path = Path(parts[-1])
            if not path.is_file():
                raise RuntimeError(f"Maven listed {path}, which does not exist")
            result.append((":".join(parts[:-1]), path))
    if not any(c.startswith("io.delta:delta-spark") for c, _ in result):
        raise RuntimeError(f"Maven resolved no delta-spark jar from {pom}")
    return result


def cache_is_complete(cache: Path | None = None) -> bool:
    """Whether the offline cache holds the pinned jars (``False`` outside a source checkout,
    where the pin in ``conf/delta/pom.xml`` is not available)."""
    try:
        return (jar_dir(cache) / COMPLETE_MARKER).is_file()
    except FileNotFoundError:
        return False


def main(argv: list[str] | None = None) -> int:
    """``python -m clustermq.pipelines.delta_jars [--jars]``: fetch the pinned jars (once), then
    print their folder, or with ``--jars`` the comma-separated list ``spark-submit --jars`` takes."""
    parser = argparse.ArgumentParser(prog="python -m clustermq.pipelines.delta_jars",
                                     description=main.__doc__)
    parser.add_argument("--jars", action="store_true",
                        help="print the jars as one comma-separated value for spark-submit --jars")
    args = parser.parse_args(argv)
    try:
        jars = ensure_delta_jars(progress=lambda m: print(m, file=sys.stderr, flush=True))
    except RuntimeError as exc:
        print(f"clustermq: error: {exc}", file=sys.stderr)
        return 2
    print(",".join(str(j) for j in jars) if args.jars else jars[0].parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
