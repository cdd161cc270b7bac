"""Download and unpack broker distributions from Maven Central, once per machine.

``clustermq cluster fetch`` (:func:`main`; ``make setup`` runs it in a checkout) is the one step
that downloads; starting a cluster only locates
the distribution (:func:`distribution_home`) and, when it is missing, fails naming that command,
so a cluster start never turns into a download of tens of megabytes.

Maven is the one artifact client this project's machines are guaranteed to reach, and its local
repository (``~/.m2``) already de-duplicates downloads, so the broker comes from there rather than
from an Apache mirror. The unpacked tree is cached (:func:`clustermq.paths.cache_dir`);
concurrent callers (two pytest workers, a test and the CLI) serialise on a lock file and the
tree only ever appears by an atomic rename, so a reader never sees a half-extracted
distribution, even after a crash mid-extraction.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clustermq.errors import NotInstalled
from clustermq.paths import build_once, cache_dir, is_complete

CLASSIC_VERSION = "5.18.3"
"""Pinned ActiveMQ Classic version: the broker facts in docs/broker-behaviour.md hold for it."""

ARTEMIS_VERSION = "2.40.0"
"""Pinned ActiveMQ Artemis version: a recent 2.x that runs on Java 17 (the machines' JDK) and
whose ``bin`` tarball is on Maven Central; the Artemis facts in docs/broker-behaviour.md hold for it."""

#: The command that fetches the distributions, named by the error about a missing one.
FETCH_COMMAND = "clustermq cluster fetch"


@dataclass(frozen=True)
class Distribution:
    """A broker distribution as published on Maven Central."""

    flavor: str
    version: str
    artifact: str  # groupId:artifactId:version:packaging:classifier
    top_dir: str  # the single top-level directory inside the archive


DISTRIBUTIONS: dict[str, Distribution] = {
    "classic": Distribution(
        flavor="classic",
        version=CLASSIC_VERSION,
        artifact=f"org.apache.activemq:apache-activemq:{CLASSIC_VERSION}:tar.gz:bin",
        top_dir=f"apache-activemq-{CLASSIC_VERSION}",
    ),
    "artemis": Distribution(
        flavor="artemis",
        version=ARTEMIS_VERSION,
        artifact=f"org.apache.activemq:apache-artemis:{ARTEMIS_VERSION}:tar.gz:bin",
        top_dir=f"apache-artemis-{ARTEMIS_VERSION}",
    ),
}


def _distribution(flavor: str) -> Distribution:
    try:
        return DISTRIBUTIONS[flavor]
    except KeyError:
        raise NotImplementedError(
            f"no broker distribution for flavor '{flavor}' yet; available: "
            f"{', '.join(sorted(DISTRIBUTIONS))}"
        ) from None


def distribution_home(flavor: str = "classic", cache: Path | None = None) -> Path:
    """The home directory of the unpacked ``flavor`` distribution, never fetching it.

    :class:`NotInstalled` naming ``clustermq cluster fetch`` when it is not in the cache.
    """
    dist = _distribution(flavor)
    final = (cache or cache_dir()) / "dist" / dist.top_dir
    if is_complete(final):
        return final
    raise NotInstalled(
        f"the {flavor} broker distribution ({dist.top_dir}) is not in {final.parent}; run "
        f"`{FETCH_COMMAND} --flavor {flavor}` once (it needs Maven and Maven Central; in a "
        f"checkout `make setup` does it; CLUSTERMQ_CACHE moves the cache)"
    )


def ensure_distribution(
    flavor: str = "classic",
    cache: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Return the home directory of the unpacked ``flavor`` distribution, fetching it if needed.

    Idempotent and safe to call from several processes at once.
    """
    dist = _distribution(flavor)
    root = (cache or cache_dir()) / "dist"

    def build(work: Path) -> Path:
        if progress:
            progress(f"fetching {dist.artifact} with Maven")
        archive = _maven_copy(dist.artifact, work / "download")
        if progress:
            progress(f"extracting {archive.name} into {root}")
        _extract(archive, work / "tree")
        tree = work / "tree" / dist.top_dir
        if not tree.is_dir():
            raise RuntimeError(f"{archive.name} has no top-level directory {dist.top_dir}/")
        return tree

    return build_once(root / dist.top_dir, build, stamp=dist.artifact)


def _maven_copy(artifact: str, out_dir: Path) -> Path:
    """Copy ``artifact`` from Maven (local repository or Central) into ``out_dir``."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(
            "Maven ('mvn') is not on PATH; it is needed once to fetch the broker "
            f"distribution {artifact}"
        )
    out_dir.mkdir(parents=True)
    cmd = [
        mvn, "-q", "-B", "dependency:copy",
        f"-Dartifact={artifact}",
        f"-DoutputDirectory={out_dir}",
    ]
    # Run outside any project so a pom.xml in the caller's directory cannot interfere.
    proc = subprocess.run(cmd, cwd=out_dir, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise RuntimeError(f"'{' '.join(cmd)}' failed (exit {proc.returncode}):\n{tail}")
    archives = sorted(out_dir.glob("*.tar.gz"))
    if len(archives) != 1:
        raise RuntimeError(f"expected one .tar.gz from Maven in {out_dir}, found {archives}")
    return archives[0]


def _extract(archive: Path, dest: Path) -> None:
    """Unpack a tarball, refusing members that would escape ``dest``."""
    dest.mkdir(parents=True)
    with tarfile.open(archive, "r:gz") as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.10.12
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - older interpreters
            base = dest.resolve()
            for member in tar.getmembers():
                target = (dest / member.name).resolve()
                if base != target and base not in target.parents:
                    raise RuntimeError(f"unsafe path in {archive.name}: {member.name}")
            tar.extractall(dest)


def main(argv: list[str] | None = None) -> int:
    """``clustermq cluster fetch [--flavor F ...]``: fetch and unpack the broker distributions
    (once; later runs only locate them), then print each one's home directory."""
    parser = argparse.ArgumentParser(
        prog=FETCH_COMMAND,
        description="Fetch and unpack the broker distributions the local cluster runs (once; later "
                    "runs only locate them), then print each one's home directory.",
        epilog=f"Distributions go to {cache_dir() / 'dist'} (CLUSTERMQ_CACHE moves it). Needs Maven "
               "('mvn') and access to Maven Central, or the artifacts already in ~/.m2.")
    parser.add_argument("--flavor", action="append", choices=list(DISTRIBUTIONS),
                        help="the broker to fetch; repeatable (default: every flavor)")
    args = parser.parse_args(argv)
    for flavor in dict.fromkeys(args.flavor or DISTRIBUTIONS):
        try:
            home = ensure_distribution(flavor, progress=lambda m: print(m, file=sys.stderr, flush=True))
        except (RuntimeError, OSError) as exc:
            print(f"clustermq: error: fetching the {flavor} distribution: {exc}", file=sys.stderr)
            return 1
        print(home, flush=True)
    return 0
