"""Where the connector's log lines go in the processes Spark starts.

The stream reader lives in a Python process Spark's JVM starts (the streaming source runner),
the writer's tasks in Python workers: neither runs the job's own ``logging`` setup, so their
INFO lines (acknowledgements, AvailableNow progress, resubscriptions) were dropped and only
warnings reached stderr through Python's last-resort handler. Those processes inherit the
driver's environment, so a level set in ``CLUSTERMQ_LOG_LEVEL`` before Spark starts reaches
them; each applies it once, when the connector is first used there.
"""

from __future__ import annotations

import logging
import os
import sys

LOG_LEVEL_ENV = "CLUSTERMQ_LOG_LEVEL"
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def apply_log_level() -> None:
    """Send ``clustermq`` records at ``$CLUSTERMQ_LOG_LEVEL`` or above to stderr (once per
    process); without the variable, leave logging as the host application configured it."""
    name = os.environ.get(LOG_LEVEL_ENV, "").strip().upper()
    level = logging.getLevelName(name) if name else None
    if not isinstance(level, int):
        return
    logger = logging.getLogger("clustermq")
    logger.setLevel(level)
    if not any(getattr(h, "_clustermq", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT))
        handler._clustermq = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False  # one line per record, also where the host logs to stderr


def log_level_for_spark(level: str = "INFO") -> None:
    """Set the level for this process and every Python process Spark starts after this call
    (unless the operator already chose one in the environment)."""
    os.environ.setdefault(LOG_LEVEL_ENV, level)
    apply_log_level()
