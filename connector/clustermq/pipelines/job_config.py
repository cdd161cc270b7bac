"""How the ready-made jobs (:mod:`clustermq.jobs`) are configured: flags, config files, credentials.

The pieces the jobs share with the demo and the benchmark (this module, ``streaming``,
``delta_stream``, ``delta_sink``) live in this package, so that the demo and the tests run
exactly the code the jobs run.

Credentials come only from the environment (``CLUSTERMQ_USERNAME`` / ``CLUSTERMQ_PASSWORD``):
command lines are readable by every user of the machine, and config files end up in
repositories. Neither is ever printed.
"""

from __future__ import annotations

import argparse
import configparser
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clustermq.errors import JobConfigError
from clustermq.logs import log_level_for_spark

USERNAME_ENV = "CLUSTERMQ_USERNAME"
PASSWORD_ENV = "CLUSTERMQ_PASSWORD"
READER_OPTIONS_SECTION = "reader_options"
#: connector options a job never takes from a flag or a file
CREDENTIAL_KEYS = ("username", "password")


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
    try:
        parser.read(file)
    except (configparser.Error, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise JobConfigError(f"--config: {path} is not an INI file with [sections]: {first}") from None
    for name in parser.sections():
        for key in parser[name]:
            if key.strip().lower() in CREDENTIAL_KEYS:
                raise credentials_refused(f"{path} [{name}]", key.strip())
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


def credentials_refused(where: str, key: str) -> JobConfigError:
    """The error for a credential given where a job does not read it (the value is never shown)."""
    return JobConfigError(
        f"{where}: '{key}' is not accepted here; jobs take credentials only from the environment "
        f"variables {USERNAME_ENV} and {PASSWORD_ENV} (command lines are visible to every user "
        "of the machine, config files end up in repositories)"
    )


def parse_key_values(items: list[str], flag: str, options: bool = True) -> dict[str, str]:
    """``KEY=VALUE`` items of a repeatable flag as a dict.

    ``options``: the items are connector options, so ``username``/``password`` are refused
    (in any case: Spark's options are case-insensitive). ``False`` for other pairs (``--header``
    maps a header name to a column, and a header may well be called ``username``).
    """
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise JobConfigError(f"{flag}: '{item}' is not KEY=VALUE")
        if options and key.strip().lower() in CREDENTIAL_KEYS:
            raise credentials_refused(flag, key.strip())
        out[key.strip()] = value
    return out


def setting_source(key: str, flags: argparse.Namespace, config_path: str | None) -> str:
    """Where setting ``key`` came from, for an error: its flag, and its config key when the
    flag was not given and a config file was."""
    flag = f"--{key.replace('_', '-')}"
    if getattr(flags, key, None) is None and config_path:
        return f"{flag} (key '{key}' in {config_path})"
    return flag


def positive_int_setting(
    value: Any, key: str, flags: argparse.Namespace, config_path: str | None
) -> int:
    """Setting ``key`` (merged by :func:`merge_settings`) as a whole number of at least 1.

    The error names the flag and, when the value came from the config file, its key there.
    """
    source = setting_source(key, flags, config_path)
    try:
        number = int(str(value).strip())
    except ValueError:
        raise JobConfigError(f"{source}: '{value}' is not a whole number") from None
    if number < 1:
        raise JobConfigError(f"{source}: {number} is below 1")
    return number


def job_source(settings: argparse.Namespace) -> dict[str, str]:
    """The options naming what a job reads or writes, from its merged settings: ``--queue``, or
    ``--topic`` (a reading job's with its ``--subscription``; the reader refuses a topic without
    one unless ``--option allowNonDurable=true``). Exactly one of the two."""
    queue, topic = settings.queue, settings.topic
    subscription = getattr(settings, "subscription", None)
    if queue and topic:
        raise JobConfigError("--queue and --topic are both set; give one of them")
    if not queue and not topic:
        raise JobConfigError("--queue or --topic is required (or 'queue' or 'topic' in the config file)")
    if queue:
        if subscription:
            raise JobConfigError("--subscription applies to --topic, not to --queue")
        return {"queue": queue}
    return {"topic": topic, **({"subscriptionName": subscription} if subscription else {})}


def source_label(source: Mapping[str, str]) -> str:
    """``queue orders`` or ``topic prices (subscription to-delta)``, for a job's output lines."""
    if "queue" in source:
        return f"queue {source['queue']}"
    name = source.get("subscriptionName")
    return f"topic {source['topic']}" + (f" (subscription {name})" if name else "")


def reader_options(
    brokers: str, source: Mapping[str, str], max_messages_per_trigger: int | None, extra: Mapping[str, str]
) -> dict[str, str]:
    """The clustermq reader options of a job: its flags (``source`` from :func:`job_source`),
    extra options, env credentials."""
    options = {"brokers": brokers, **source}
    if max_messages_per_trigger:
        options["maxMessagesPerTrigger"] = str(max_messages_per_trigger)
    options.update(extra)
    options.update(credentials_from_env())
    return options
