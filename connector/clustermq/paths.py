"""Where clustermq keeps files outside the package: the cache (broker distributions, the Delta
jars, local clusters), and the lock that guards filling it.

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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CACHE_ENV = "CLUSTERMQ_CACHE"
#: Written last into a cached tree (a broker distribution, the Delta jars): a tree without it
#: was left half-made by a process that died and is not trusted.
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
