"""What the ready-made jobs in ``spark_jobs/`` share: config files, credentials, triggers.

The jobs are scripts users run as they are; their logic lives here (and in ``delta_sink``) so
that the demo and the tests run exactly the code the scripts run.

Credentials come only from the environment (``CLUSTERMQ_USERNAME`` / ``CLUSTERMQ_PASSWORD``):
command lines are readable by every user of the machine, and config files end up in
repositories. Neither is ever printed.
"""

from __future__ import annotations

import argparse
import configparser
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from clustermq.errors import JobConfigError
from clustermq.logs import log_level_for_spark

USERNAME_ENV = "CLUSTERMQ_USERNAME"
PASSWORD_ENV = "CLUSTERMQ_PASSWORD"
READER_OPTIONS_SECTION = "reader_options"


def job_logging() -> None:
    """Show the connector's INFO lines (acknowledgements, AvailableNow progress, node losses)
    on stderr, from the driver and from the processes Spark starts: a job's operator needs them
    to tell a finished drain from an early end. ``CLUSTERMQ_LOG_LEVEL`` overrides the level."""
    log_level_for_spark("INFO")


def credentials_from_env() -> dict[str, str]:
    """``username``/``password`` options from the environment (empty when unset)."""
    options = {}
    if os.environ.get(USERNAME_ENV):
        options["username"] = os.environ[USERNAME_ENV]
    if os.environ.get(PASSWORD_ENV):
        options["password"] = os.environ[PASSWORD_ENV]
    return options


def load_config(path: str | None, section: str) -> tuple[dict[str, str], dict[str, str]]:
    """(settings of ``[section]``, ``[reader_options]``) from an INI file; empty without a file.

    INI (stdlib ``configparser``) rather than TOML: ``tomllib`` needs Python 3.11 and the
    project supports 3.10. Keys are the long flag names with ``_`` for ``-``.
    """
    if not path:
        return {}, {}
    file = Path(path)
    if not file.is_file():
        raise JobConfigError(f"--config: {path} does not exist")
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep option case
    parser.read(file)
    for forbidden in ("password", "username"):
        for name in parser.sections():
            if any(k.lower() == forbidden for k in parser[name]):
                raise JobConfigError(
                    f"{path}: '{forbidden}' is not read from config files; set "
                    f"{USERNAME_ENV} / {PASSWORD_ENV} in the environment"
                )
    settings = dict(parser[section]) if parser.has_section(section) else {}
    reader = dict(parser[READER_OPTIONS_SECTION]) if parser.has_section(READER_OPTIONS_SECTION) else {}
    return settings, reader


def merge_settings(
    args: argparse.Namespace,
    config: Mapping[str, str],
    defaults: Mapping[str, Any],
    required: tuple[str, ...],
) -> argparse.Namespace:
    """Flags win over the config file, which wins over ``defaults``; check ``required``.

    An unknown key in the config file is an error (a typo would otherwise be ignored silently).
    """
    known = set(defaults) | set(required)
    unknown = sorted(set(config) - known)
    if unknown:
        raise JobConfigError(
            f"config file: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    merged = argparse.Namespace(**vars(args))
    for key in known:
        if getattr(merged, key, None) is None:
            setattr(merged, key, config.get(key, defaults.get(key)))
    missing = [k for k in required if getattr(merged, k, None) in (None, "")]
    if missing:
        raise JobConfigError(
            "; ".join(f"--{k.replace('_', '-')} is required (or '{k}' in the config file)"
                      for k in missing)
        )
    return merged


def parse_key_values(items: list[str], flag: str) -> dict[str, str]:
    """``KEY=VALUE`` items of a repeatable flag as a dict."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise JobConfigError(f"{flag}: '{item}' is not KEY=VALUE")
        if key.strip().lower() in ("password", "username"):
            raise JobConfigError(
                f"{flag}: credentials are read from {USERNAME_ENV} / {PASSWORD_ENV} only"
            )
        out[key.strip()] = value
    return out


def reader_options(
    brokers: str, queue: str, max_messages_per_trigger: int | None, extra: Mapping[str, str]
) -> dict[str, str]:
    """The clustermq reader options of a job: its flags, extra options, env credentials."""
    options = {"brokers": brokers, "queue": queue}
    if max_messages_per_trigger:
        options["maxMessagesPerTrigger"] = str(max_messages_per_trigger)
    options.update(extra)
    options.update(credentials_from_env())
    return options


def body_parse(parse: str | None, schema: str | None) -> Any:
    """The ``BodyParse`` of ``--parse``/``--schema`` (``None`` without ``--parse``).

    Checked before any Spark work: a parse without a schema, a schema without a parse or an
    unknown format would otherwise show up only at the first batch. The DDL itself is parsed by
    Spark when the query starts (``start_queue_to_delta``).
    """
    from clustermq.pipelines.delta_sink import PARSE_FORMATS, BodyParse

    parse = (parse or "").strip() or None
    schema = (schema or "").strip() or None
    if parse is None:
        if schema is not None:
            raise JobConfigError("--schema is set but --parse is not (use --parse json)")
        return None
    if parse not in PARSE_FORMATS:
        raise JobConfigError(f"--parse: '{parse}' is not one of {', '.join(PARSE_FORMATS)}")
    if schema is None:
        raise JobConfigError(
            "--parse json needs --schema '<DDL>' (or 'schema' in the config file), e.g. "
            "--schema 'order long, customer string'")
    return BodyParse(schema=schema, format=parse)


def apply_trigger(writer: Any, trigger: str) -> Any:
    """``availableNow`` or ``processingTime=<interval>`` on a ``DataStreamWriter``."""
    if trigger == "availableNow":
        return writer.trigger(availableNow=True)
    if trigger.startswith("processingTime="):
        return writer.trigger(processingTime=trigger.split("=", 1)[1])
    raise JobConfigError(
        f"--trigger: '{trigger}' is not availableNow or processingTime=<interval>"
    )


def run_until_done(query: Any, on_tick: Callable[[], None] | None = None) -> None:
    """Wait for the query; SIGTERM/SIGINT stop it cleanly (acks stay tied to commits).

    A stop between batches loses nothing; a stop during a batch leaves that batch for the
    next run (replayed from the checkpoint), like a crash. ``on_tick`` runs about once a
    second (progress lines) and once more at the end.
    """
    stop = threading.Event()

    def request_stop(signum: int, frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while query.isActive:
            if stop.is_set():
                print("stopping the query (signal received)", file=sys.stderr, flush=True)
                query.stop()
                break
            query.awaitTermination(1)
            if on_tick is not None:
                on_tick()
        if on_tick is not None:
            on_tick()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"streaming query {query.id} failed: {error}")


class StreamProgress:
    """Prints one line per finished micro-batch: messages so far against the measured backlog."""

    def __init__(self, query: Any, backlog: int | None, what: str = "exported") -> None:
        self.query = query
        self.backlog = backlog
        self.what = what
        self.done = 0
        self._seen: set[int] = set()

    def __call__(self) -> None:
        for progress in self.query.recentProgress:
            batch = progress["batchId"] if isinstance(progress, dict) else progress.batchId
            rows = progress["numInputRows"] if isinstance(progress, dict) else progress.numInputRows
            if batch in self._seen or not rows:
                continue
            self._seen.add(batch)
            self.done += int(rows)
            print(self.line(batch), flush=True)

    def line(self, batch: int) -> str:
        if self.backlog:
            pct = 100.0 * self.done / self.backlog
            return f"batch {batch}: {self.what} {self.done} of {self.backlog} messages ({pct:.0f}%)"
        return f"batch {batch}: {self.what} {self.done} messages"


def measure_backlog(options: Mapping[str, str]) -> tuple[int | None, str]:
    """The queue's depth over all nodes (``None`` if a node did not answer) and a table of it.

    ``options`` are the job's reader options, parsed as the reader parses them, so the probe
    connects as the reader does (credentials, ``sslCaFile`` and the other TLS settings) and a
    malformed option fails here, before any message is consumed.
    """
    from clustermq.broker.depth import connection_depths, format_depth_table
    from clustermq.options import ReadOptions

    depths = connection_depths(ReadOptions.parse(options).connection)
    total = depths.total if depths.complete else None
    return total, format_depth_table(depths)
