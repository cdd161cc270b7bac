"""A Spark home for a session this Python launches, whose Python processes import PySpark with
cached bytecode.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process it
starts, and Python writes no bytecode for a module it imports from a zip: on a pip-installed
PySpark each of those processes compiles PySpark again. The driver starts such a process for
every Python data source call it plans (a streaming source's runner, a write's commit), and waits
a fixed 10 s for it to connect back; on a busy 2-core machine the compiling was enough to miss
that (docs/design.md, "Python processes Spark starts").

The home made here links every entry of the installed ``pyspark`` directory except
``python/lib/pyspark.zip``, so those processes import the same PySpark from this interpreter's
site-packages, bytecode cached. It is used only where that is the same code: the session's
Python processes run this interpreter and no ``SPARK_HOME`` was given.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pyspark

from clustermq.paths import build_once, cache_dir

#: What Spark puts first on its Python processes' path, and what this home leaves out.
PYSPARK_ZIP = Path("python") / "lib" / "pyspark.zip"


def installed_home() -> Path:
    """The pip-installed ``pyspark`` directory, which is a Spark home (``bin``, ``jars``)."""
    return Path(pyspark.__file__).resolve().parent


def bytecode_home(cache: Path | None = None) -> Path:
    """The linked home for the installed PySpark, made once per install.

    Every top-level entry of the installed home is a symbolic link, ``python/lib`` holds links
    to everything but the zip; the folder's name carries the version and a digest of the
    install's path, so two installs sharing the cache keep their own homes.
    """
    source = installed_home()
    digest = hashlib.sha256(str(source).encode()).hexdigest()[:12]
    home = (cache or cache_dir()) / "spark-home" / f"pyspark-{pyspark.__version__}-{digest}"

    def build(work: Path) -> Path:
        tree = work / "home"  # made with the umask's modes, unlike the private work folder
        tree.mkdir()
        for entry in source.iterdir():
            if entry.name != "python":
                (tree / entry.name).symlink_to(entry)
        lib = tree / PYSPARK_ZIP.parent
        lib.mkdir(parents=True)
        for entry in (source / PYSPARK_ZIP.parent).iterdir():
            if entry.name != PYSPARK_ZIP.name:
                (lib / entry.name).symlink_to(entry)
        return tree

    return build_once(home, build, stamp=str(source))


def use_bytecode_home() -> None:
    """Point ``SPARK_HOME`` at :func:`bytecode_home` for the JVM this Python is about to launch,
    when its Python processes run this interpreter and no home was chosen."""
    if "SPARK_HOME" in os.environ:
        return
    if any(os.environ.get(name, sys.executable) != sys.executable
           for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")):
        return
    if not (installed_home() / PYSPARK_ZIP).is_file():
        return
    os.environ["SPARK_HOME"] = str(bytecode_home())
