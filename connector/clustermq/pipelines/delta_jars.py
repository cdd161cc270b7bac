"""Delta Lake for jobs, tests and benchmarks: pinned jars fetched once, one session builder.

delta-spark's Python package carries no jars, and ``spark.jars.packages`` would make every
SparkSession resolve and download at start (slow, and fatal on a machine that cannot reach
Maven Central at that moment). So the jars are resolved once, with the machine's Maven client,
from the pinned ``conf/delta/pom.xml`` into the git-ignored cache (``make setup`` does it), and
:func:`delta_session` only ever reads them from there. A missing cache is an error that names
``make setup``, never a download.

The jars must be on ``spark.jars`` when the JVM starts: the Delta SQL extension and catalog
are loaded by the driver's class loader, which a later session in the same JVM cannot extend.
PySpark passes the builder's configuration to ``spark-submit`` when it launches the JVM, so the
first session of a process must be built here.

Run ``python -m clustermq.pipelines.delta_jars`` to fetch (idempotent; prints the jar folder).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path

from clustermq.errors import DeltaJarsMissing
from clustermq.paths import COMPLETE_MARKER, cache_dir, conf_dir, exclusive_lock

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
MANIFEST = "MANIFEST.txt"

# Local sessions only (override with extra_conf). Delta rebuilds a table's state with this many
# tasks after every commit; its default of 50 made a 1,000-row batch take ~30 s on 2 cores
# instead of ~3 s (measured). The console progress bar garbles the jobs' own progress lines.
LOCAL_DEFAULTS = {
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.ui.showConsoleProgress": "false",
}


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
    """The jars pyspark itself runs with (what the Delta jars must not duplicate)."""
    import pyspark

    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home) / "jars"
    return Path(pyspark.__file__).resolve().parent / "jars"


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
        shipped = _artifacts_in(spark_jars_dir())
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


def _artifacts_in(jars: Path) -> set[str]:
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


def delta_conf() -> dict[str, str]:
    """The SparkSession settings that enable Delta with the cached jars."""
    return {
        "spark.jars": ",".join(str(j) for j in delta_jars()),
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
    }


def delta_session(
    app_name: str = "clustermq",
    master: str = "local[2]",
    extra_conf: Mapping[str, str] | None = None,
):  # -> SparkSession (import kept lazy: the fetch path must not need a JVM)
    """A local SparkSession with Delta (cached jars, SQL extension, catalog) and clustermq.

    Must be the first session of the process (see the module docstring); if a session without
    Delta is already active, the error says so instead of failing later on a missing class.
    """
    from pyspark.sql import SparkSession

    from clustermq.pipelines.session import local_session

    conf = delta_conf()
    active = SparkSession.getActiveSession()
    if active is not None and active.conf.get("spark.sql.extensions", "") != DELTA_EXTENSION:
        raise RuntimeError(
            "a SparkSession without Delta is already running in this process; build the first "
            "session with clustermq.pipelines.delta_jars.delta_session() (Delta's jars must be on the class "
            "path when the JVM starts)"
        )
    conf.update(LOCAL_DEFAULTS)
    conf.update(extra_conf or {})
    return local_session(app_name, master, conf)


def main(argv: list[str] | None = None) -> int:
    """``python -m clustermq.pipelines.delta_jars``: fetch the pinned jars (once) and print their folder."""
    try:
        jars = ensure_delta_jars(progress=lambda m: print(m, file=sys.stderr, flush=True))
    except RuntimeError as exc:
        print(f"clustermq: error: {exc}", file=sys.stderr)
        return 2
    print(jars[0].parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
