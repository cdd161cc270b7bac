"""How every job parses its flags and how it fails: one line on stderr, an exit code that says why.

A job runs from a shell, a scheduler or ``spark-submit``. When it fails, the fact its operator
needs is which option, node or table to fix; Spark delivers that fact buried in a Py4J or
``StreamingQueryException`` traceback of some eighty lines, in which the connector's own error
(raised in the Python process Spark's JVM runs the source in) appears only as text. So every
job's ``main`` goes through :func:`run_job`, which prints exactly one line

    <job>: error: <cause>

and returns 2 for a bad setting (a flag, a config file, a reader or writer option, a missing
installation) or 1 for a failure at run time (an unreachable cluster, a node that refused the
login, a table Spark cannot write). The traceback follows only with ``CLUSTERMQ_LOG_LEVEL=DEBUG``.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from clustermq import errors
from clustermq.errors import ClusterMQError, DeltaJarsMissing, JobConfigError, NotInstalled, OptionError
from clustermq.logs import LOG_LEVEL_ENV
from clustermq.pipelines.delta_session import delta_session
from clustermq.pipelines.job_config import PASSWORD_ENV, job_logging
from clustermq.pipelines.spark_session import job_session

log = logging.getLogger(__name__)

#: Exit code of a job refused for a bad setting (what argparse itself uses for a bad flag).
EXIT_SETTING = 2
#: Exit code of a job that failed while running.
EXIT_FAILURE = 1
#: Errors the operator fixes by changing a setting or the installation, not by waiting.
SETTING_ERRORS: tuple[type[ClusterMQError], ...] = (JobConfigError, OptionError, NotInstalled, DeltaJarsMissing)
#: Errors whose message already starts with the flag or option it names.
_SELF_NAMING = (JobConfigError, OptionError)
#: Longest cause printed: a message naming every node of a large cluster still fits.
MAX_CAUSE = 2000
#: Spark loggers whose errors are the failure :func:`run_job` reports in one line, logged again
#: with the whole Java stack and the Python traceback quoted in it: a streaming query's end and
#: a file write's abort (Spark 4.x class names). Other Spark logging is left as configured.
FAILURE_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
)

_OWN_ERROR = re.compile(r"^clustermq\.errors\.(\w+): (.*)$", re.M)
_PY_ERROR = re.compile(r"^([A-Za-z_][\w.]*): (.+)$")
_SPARK_PREFIX = re.compile(r"^\[STREAM_FAILED\] Query \[[^\]]*\] terminated with exception: ")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*$")


class JobArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad flag is a :class:`JobConfigError` (one line, exit 2) instead of
    argparse's usage block; ``--help`` is unchanged."""

    def error(self, message: str) -> NoReturn:
        raise JobConfigError(message)


def job_parser(name: str, doc: str | None, *, cluster_required: bool = True,
               reading: bool = True) -> JobArgumentParser:
    """The parser of job ``name``, its module docstring as the help text, with the flags every
    job has: ``--brokers`` (optional where a config file may give it) and ``--queue`` or
    ``--topic`` (checked by :func:`~clustermq.pipelines.job_config.job_source`, which also sees
    the config file), plus ``--subscription`` for a job that reads."""
    parser = JobArgumentParser(prog=name, description=doc,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brokers", required=cluster_required)
    parser.add_argument("--queue", help="the queue (or --topic)")
    parser.add_argument("--topic", help="a topic instead of a queue")
    if reading:
        parser.add_argument("--subscription", metavar="NAME",
                            help="with --topic: the durable subscription to read through (the "
                                 "reader's subscriptionName; one job per subscription)")
    return parser


def positive_int(text: str) -> int:
    """argparse ``type`` of a count flag: a whole number of at least 1 (argparse names the flag)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def debug_enabled() -> bool:
    """Whether the operator asked for tracebacks (``CLUSTERMQ_LOG_LEVEL=DEBUG``)."""
    return os.environ.get(LOG_LEVEL_ENV, "").strip().upper() == "DEBUG"


@dataclass(frozen=True)
class Failure:
    """What a failed job reports: its exit code and the one-line cause."""

    exit_code: int
    cause: str


def describe_failure(exc: BaseException) -> Failure:
    """The exit code and one-line cause of ``exc``, however Spark wrapped it.

    A connector error raised in this process is reported as it is. One raised where Spark runs
    Python (the streaming source's runner, a task) reaches the driver only as the text of a
    ``StreamingQueryException``, ``Py4JJavaError`` or ``PythonException``: its class and message
    are found in that text. Anything else is reported by its class and first line.
    """
    if isinstance(exc, ClusterMQError):
        return _failure(type(exc), str(exc))
    text = str(exc)
    own = _OWN_ERROR.search(text)
    if own is not None:
        cls = getattr(errors, own.group(1), None)
        message = _with_continuation(own.group(2), text[own.end():])
        if isinstance(cls, type) and issubclass(cls, ClusterMQError):
            return _failure(cls, message)
        return Failure(EXIT_FAILURE, _clean(f"{own.group(1)}: {message}"))
    embedded = _embedded_python_error(text)
    if embedded is not None:
        return Failure(EXIT_FAILURE, _clean(embedded))
    first = _SPARK_PREFIX.sub("", text.strip().splitlines()[0] if text.strip() else "")
    return Failure(EXIT_FAILURE, _clean(f"{type(exc).__name__}: {first}" if first else type(exc).__name__))


def _failure(cls: type[BaseException], message: str) -> Failure:
    code = EXIT_SETTING if issubclass(cls, SETTING_ERRORS) else EXIT_FAILURE
    cause = message if issubclass(cls, _SELF_NAMING) else f"{cls.__name__}: {message}"
    return Failure(code, _clean(cause))


def _with_continuation(first: str, rest: str) -> str:
    """An error message that spans lines, up to where Spark's own text resumes."""
    lines = [first]
    for line in rest.splitlines()[1:]:
        stripped = line.strip()
        if (not stripped or stripped.startswith(("SQLSTATE", "at ", "JVM stacktrace", "Traceback",
                                                 "File ", "During handling", "The above"))):
            break
        lines.append(stripped)
    return " ".join(lines)


def _embedded_python_error(text: str) -> str | None:
    """``Class: message`` of the first Python traceback quoted in ``text``."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "Traceback (most recent call last):" not in line:
            continue
        for later in lines[i + 1:]:
            if later[:1].isspace() or not later.strip():
                continue
            match = _PY_ERROR.match(later.strip())
            if match:
                return f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2)}"
            break
    return None


def _clean(cause: str) -> str:
    """One line, without Spark's SQLSTATE suffix or the connector's prefix, never a password."""
    cause = " ".join(part.strip() for part in cause.splitlines() if part.strip())
    cause = _SQLSTATE.sub("", cause).replace(": clustermq: ", ": ")
    cause = cause.removeprefix("clustermq: ")
    password = os.environ.get(PASSWORD_ENV)
    if password:  # as a whole word: a short password must not mangle the words it occurs in
        cause = re.sub(rf"(?<!\w){re.escape(password)}(?!\w)", "***", cause)
    return cause if len(cause) <= MAX_CAUSE else cause[: MAX_CAUSE - 3] + "..."


def run_job(name: str, body: Callable[[], int | None]) -> int:
    """Run a job's ``body``; its exit code, with any failure reported in one line on stderr.

    ``--help`` (argparse's ``SystemExit``) passes through as its code. With
    ``CLUSTERMQ_LOG_LEVEL=DEBUG`` the traceback is printed before the line.
    """
    try:
        code = body()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_SETTING)
    except KeyboardInterrupt:
        print(f"{name}: error: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as exc:
        failure = describe_failure(exc)
        if debug_enabled():
            traceback.print_exc()
        print(f"{name}: error: {failure.cause}", file=sys.stderr, flush=True)
        return failure.exit_code
    return 0 if code is None else code


def run_spark_job(
    name: str,
    argv: list[str] | None,
    parse: Callable[[list[str] | None], argparse.Namespace],
    session: Callable[[argparse.Namespace], Any],
    work: Callable[[Any, argparse.Namespace], object],
) -> int:
    """Every job's ``main``: parse the flags, start the session, run ``work``, and stop the
    session whatever happens, all under :func:`run_job`'s one-line failure report. ``work``
    returns what it produced (a count, for callers in-process); a job that returns has
    succeeded, so its exit code is 0."""

    def body() -> int:
        args = parse(argv)
        job_logging()
        spark = session(args)
        try:
            quiet_spark_failure_logs(spark)
            work(spark, args)
        finally:
            spark.stop()
        return 0

    return run_job(name, body)


def session_for_format(app: str, table_format: str) -> Any:
    """A session with Delta for a Delta table; a plain job session for Parquet, which must work
    where Delta is not installed."""
    return delta_session(app) if table_format == "delta" else job_session(app)


def quiet_spark_failure_logs(spark: Any) -> None:
    """Stop Spark from logging again, with its traceback, the failure :func:`run_job` reports
    in one line (:data:`FAILURE_LOGGERS`); with ``CLUSTERMQ_LOG_LEVEL=DEBUG`` Spark's log stays
    as it is.

    A log setting must never fail the job: where Spark's log4j cannot be reached (no JVM in
    this process) it is left alone.
    """
    if debug_enabled():
        return
    try:
        jvm = spark.sparkContext._jvm
        off = jvm.org.apache.logging.log4j.Level.toLevel("OFF")
        for logger in FAILURE_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(logger, off)
    except Exception as exc:  # logging only: the job runs the same either way
        log.debug("could not quieten Spark's failure logs: %s", exc)
