"""Where the local-cluster harness keeps things: the repository root, the cache, the templates.

The package is installed editable from the repository, so the repository is found from this
file's own location rather than from the current directory: the CLI and the tests then agree on
the same cache and the same ``conf/`` templates wherever they are started from.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CACHE_ENV = "CLUSTERMQ_CACHE"


def repo_root() -> Path | None:
    """The repository root (``connector/clustermq/localcluster/`` is three levels below it).

    ``None`` when the package is not running from a source checkout (no ``pyproject.toml``
    there), e.g. after a non-editable install.
    """
    root = Path(__file__).resolve().parents[3]
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


def default_cluster_dir() -> Path:
    """The directory the CLI uses when ``--dir`` is not given."""
    return cache_dir() / "cluster"


def conf_dir() -> Path:
    """The repository's ``conf/`` directory, where the broker config templates live."""
    root = repo_root()
    if root is None or not (root / "conf").is_dir():
        raise FileNotFoundError(
            "cannot find the clustermq 'conf/' templates: the local cluster harness needs the "
            "package installed editable from its repository (pip install -e .)"
        )
    return root / "conf"


def jdk_tool(name: str) -> str | None:
    """``$JAVA_HOME/bin/<name>`` when set, else ``<name>`` from PATH; ``None`` when neither.

    The brokers (``java``) and the TLS set-up (``keytool``) must use the same JDK.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / name).is_file():
        return str(Path(java_home) / "bin" / name)
    return shutil.which(name)
