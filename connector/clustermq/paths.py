"""Where the project keeps files outside the package: the repository root, the cache, ``conf/``.

The package is installed editable from the repository, so the repository is found from this
file's own location rather than from the current directory: the CLI, the jobs and the tests
then agree on the same cache and the same ``conf/`` templates wherever they are started from.
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
    """The repository root (``connector/clustermq/`` is two levels below it).

    ``None`` when the package is not running from a source checkout (no ``pyproject.toml``
    there), e.g. after a non-editable install.
    """
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else None


def cache_dir() -> Path:
    """``$CLUSTERMQ_CACHE``, else ``<repo>/.cache/clustermq``, else ``~/.cache/clustermq``.

    The repository cache is git-ignored and sits next to the code that needs it, so
    distributions and cluster state do not leak into the user's home during development.
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser().resolve()
    root = repo_root()
    if root is not None:
        return root / ".cache" / "clustermq"
    return Path.home() / ".cache" / "clustermq"


def conf_dir() -> Path:
    """The repository's ``conf/`` directory (broker templates, the pinned Delta pom)."""
    root = repo_root()
    if root is None or not (root / "conf").is_dir():
        raise FileNotFoundError(
            "cannot find the clustermq 'conf/' directory: the local cluster harness and the "
            "Delta jar cache need the package installed editable from its repository "
            "(pip install -e .)"
        )
    return root / "conf"


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``; the kernel drops it if this process dies."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
