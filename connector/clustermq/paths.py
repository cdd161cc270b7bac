"""Where clustermq keeps files outside the package: the cache (broker distributions, the Delta
jars, the linked Spark home, local clusters), and how a tree of it is filled once.

What the package itself needs (the broker config templates, the Delta pom) is package data, read
with :mod:`importlib.resources`, so a wheel installed anywhere works without the repository. The
repository matters only for where the cache goes by default: in a source checkout (an editable
install, found from this file's own location rather than from the current directory) it is the
checkout's git-ignored ``.cache/``, so the CLI, the jobs and the tests agree on one cache
wherever they are started from.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

CACHE_ENV = "CLUSTERMQ_CACHE"
#: Written last into a cached tree (a broker distribution, the Delta jars, the Spark home): a tree
#: without it was left half-made by a process that died and is not trusted.
COMPLETE_MARKER = ".clustermq-complete"


def repo_root() -> Path | None:
    """The source checkout this package runs from (``connector/clustermq/`` is two levels below
    it), or ``None`` when it does not, e.g. after ``pip install clustermq``.

    Used only to place the cache; nothing is read from the checkout.
    """
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else None


def cache_dir() -> Path:
    """``$CLUSTERMQ_CACHE``, else ``<checkout>/.cache/clustermq``, else ``~/.cache/clustermq``.

    In a checkout the cache is git-ignored and sits next to the code that needs it, so
    distributions and cluster state do not leak into the developer's home; an installed package
    uses the home directory's cache, and ``$CLUSTERMQ_CACHE`` lets several installs share one
    (one fetch then serves them all).
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser().resolve()
    root = repo_root()
    if root is not None:
        return root / ".cache" / "clustermq"
    return Path.home() / ".cache" / "clustermq"


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``; the kernel drops it if this process dies."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def is_complete(tree: Path) -> bool:
    """Whether ``tree`` was finished by :func:`build_once` (it holds :data:`COMPLETE_MARKER`)."""
    return (tree / COMPLETE_MARKER).is_file()


def build_once(final: Path, build: Callable[[Path], Path], stamp: str = "") -> Path:
    """``final``, made by ``build`` unless a finished one is there; safe from several processes.

    ``build(work)`` fills a fresh folder next to ``final`` and returns the tree to install (the
    folder itself or one inside it). The tree gets the marker (``stamp`` as its text) and only
    then takes ``final``'s name, so no process ever sees half a tree as finished: one that died
    while building left only its work folder, and an unmarked ``final`` is replaced. Waiters on
    the lock find the tree finished and build nothing.
    """
    if is_complete(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(final.parent / f".{final.name}.lock"):
        if is_complete(final):  # another process finished while we waited
            return final
        work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            tree = build(work)
            (tree / COMPLETE_MARKER).write_text(stamp + "\n")
            if final.exists():  # unmarked: left half-made, not trusted
                shutil.rmtree(final)
            os.rename(tree, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final
