"""Where the local-cluster harness keeps cluster state, and which JDK tools it runs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from clustermq.paths import cache_dir


def default_cluster_dir() -> Path:
    """The directory the CLI uses when ``--dir`` is not given."""
    return cache_dir() / "cluster"


def jdk_tool(name: str) -> str | None:
    """``$JAVA_HOME/bin/<name>`` when set, else ``<name>`` from PATH; ``None`` when neither.

    The brokers (``java``) and the TLS set-up (``keytool``) must use the same JDK.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / name).is_file():
        return str(Path(java_home) / "bin" / name)
    return shutil.which(name)
