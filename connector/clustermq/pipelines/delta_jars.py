"""The pinned Delta Lake jars: fetched once, then only located.

delta-spark's Python package carries no jars: its helper and ``--packages`` make Spark resolve
and download them at start, which needs Maven Central at that moment. This module is the route
for machines without it: the jars are resolved once, with the machine's Maven client, from the
pinned ``delta_pom.xml`` (package data next to this module, so an installed wheel has it too)
into the clustermq cache (:func:`clustermq.paths.cache_dir`; ``make setup`` fills it in a
checkout, and the test suite's sessions use it), and only ever read from there.

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
from importlib import resources
from pathlib import Path

from clustermq.errors import ClusterMQError, DeltaJarsMissing, NotInstalled
from clustermq.paths import build_once, cache_dir, is_complete

MANIFEST = "MANIFEST.txt"
#: The pom that pins the Delta release: package data of ``clustermq.pipelines``.
POM_PACKAGE, POM = "clustermq.pipelines", "delta_pom.xml"
#: The command that fills the cache, named by every error about a missing one.
FETCH_COMMAND = "python -m clustermq.pipelines.delta_jars"


def pom_text() -> str:
    """The text of ``delta_pom.xml``, the one place the Delta version is pinned."""
    try:
        return (resources.files(POM_PACKAGE) / POM).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotInstalled(
            f"{POM} is missing from the installed {POM_PACKAGE} package; reinstall clustermq "
            "(pip install --force-reinstall clustermq)"
        ) from None


def pinned_artifact(pom: Path | None = None) -> tuple[str, str]:
    """(artifactId, version) of the Delta dependency the pom pins, e.g. ("delta-spark_4.2_2.13", "4.4.0")."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.parse(pom).getroot() if pom is not None else ET.fromstring(pom_text())
    version = root.findtext("m:properties/m:delta.version", namespaces=ns)
    for dep in root.findall("m:dependencies/m:dependency", ns):
        if dep.findtext("m:groupId", namespaces=ns) == "io.delta":
            artifact = dep.findtext("m:artifactId", namespaces=ns)
            if artifact and version:
                return artifact, version
    raise NotInstalled(f"{pom or POM} pins no io.delta dependency with a delta.version; reinstall clustermq")


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
        raise NotInstalled(f"pyspark is not installed in this interpreter ({sys.executable}): pip install clustermq")
    return Path(next(iter(spec.submodule_search_locations))).resolve() / "jars"


def delta_jars(cache: Path | None = None) -> list[Path]:
    """The cached Delta jars; raises :class:`DeltaJarsMissing` naming the command that fetches
    them (and ``make setup``, which runs it in a checkout) if absent."""
    folder = jar_dir(cache)
    if not is_complete(folder):
        artifact, version = pinned_artifact()
        raise DeltaJarsMissing(
            f"the Delta jars (io.delta:{artifact}:{version}) are not in {folder}; run "
            f"`{FETCH_COMMAND}` once on a machine with Maven (in a checkout `make setup` does it; "
            f"CLUSTERMQ_CACHE moves the cache): SparkSessions never download them at start"
        )
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise DeltaJarsMissing(f"{folder} holds no jars; delete it and run `{FETCH_COMMAND}`")
    return jars


def ensure_delta_jars(
    cache: Path | None = None, progress: Callable[[str], None] | None = None
) -> list[Path]:
    """Fetch the pinned Delta jars with Maven unless cached; safe to run from several processes."""
    folder = jar_dir(cache)
    built = False

    def build(work: Path) -> Path:
        nonlocal built
        built = True
        if progress:
            progress(f"resolving io.delta:{':'.join(pinned_artifact())} ({POM}) with Maven")
        resolved = _maven_runtime_dependencies(pom_text())
        shipped = artifacts_in(spark_jars_dir())
        tree = work / "jars"
        tree.mkdir()
        lines = []
        for coords, path in resolved:
            artifact_id = coords.split(":")[1]
            if artifact_id in shipped:
                lines.append(f"skipped (pyspark ships {artifact_id})  {coords}")
                continue
            shutil.copy2(path, tree / path.name)
            lines.append(f"included  {coords}")
        (tree / MANIFEST).write_text("\n".join(sorted(lines)) + "\n")
        return tree

    build_once(folder, build, stamp=str(pinned_artifact()))
    if built and progress:
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


def _maven_runtime_dependencies(pom_xml: str) -> list[tuple[str, Path]]:
    """Resolve the runtime dependencies of the pom ``pom_xml``; return (coordinates, file in
    ~/.m2) pairs. Maven runs on a copy in a temporary folder: the installed package may be
    read-only, and nothing of Maven's should land next to it."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DeltaJarsMissing("Maven ('mvn') is not on PATH; it is needed once to fetch the Delta jars")
    with tempfile.TemporaryDirectory(prefix="clustermq-delta-") as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(pom_xml, encoding="utf-8")
        listing = Path(tmp) / "dependencies.txt"
        cmd = [
            mvn, "-q", "-B", "-f", str(pom), "dependency:list",
            "-DincludeScope=runtime", "-DoutputAbsoluteArtifactFilename=true",
            f"-DoutputFile={listing}",
        ]
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0 or not listing.is_file():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
            raise DeltaJarsMissing(f"'{' '.join(cmd)}' failed (exit {proc.returncode}):\n{tail}")
        result = []
        for line in listing.read_text().splitlines():
            parts = line.strip().split(":")
            # group:artifact:type[:classifier]:version:scope:/abs/path
            if len(parts) < 6 or not parts[-1].endswith(".jar"):
                continue
            path = Path(parts[-1])
            if not path.is_file():
                raise DeltaJarsMissing(f"Maven listed {path}, which does not exist")
            result.append((":".join(parts[:-1]), path))
    if not any(c.startswith("io.delta:delta-spark") for c, _ in result):
        raise DeltaJarsMissing(f"Maven resolved no delta-spark jar from {POM}")
    return result


def cache_is_complete(cache: Path | None = None) -> bool:
    """Whether the offline cache holds the pinned jars (``False`` also when the package lost its
    ``delta_pom.xml``, so that the caller names the routes to Delta rather than a reinstall)."""
    try:
        return is_complete(jar_dir(cache))
    except NotInstalled:
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
    except ClusterMQError as exc:
        print(f"clustermq: error: {exc}", file=sys.stderr)
        return 2
    print(",".join(str(j) for j in jars) if args.jars else jars[0].parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
