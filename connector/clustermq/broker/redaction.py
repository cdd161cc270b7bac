r"""Keeping secrets out of logs: stomp.py's frame logging and its noisy TLS shutdown.

stomp.py 9.0.0 logs every frame it sends at DEBUG ("sending frame: [b'CONNECT', ...,
b'passcode:<password>\n', ...]"). Its own scrubber (utils.PASSCODE_RE, r"passcode:\s+...")
wants whitespace after the colon, which a STOMP header never has, so the password is logged in
clear. The filter below is installed on stomp.py's one logger ("stomp.py") when this
module is imported -- which :mod:`clustermq.broker.stomp_connection`, the one place that opens
connections, does, in the driver and in Spark's Python workers -- and rewrites each record
before any handler sees it.
"""

from __future__ import annotations

import logging
import re
import threading

# Up to the end of the header line: a real newline, or the two characters \n of a bytes repr
# (escaped backslashes inside the value are skipped over).
_PASSCODE = re.compile(r"(passcode:)(?:\\\\|\\(?!n)|[^\\\n])*")
_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()
_MAX_SECRETS = 64


def register_secret(value: str | None) -> None:
    """Redact ``value`` from stomp.py's log records too (wherever it appears, not only in CONNECT)."""
    if value and len(value) >= 4:
        with _SECRETS_LOCK:
            if len(_SECRETS) < _MAX_SECRETS:
                _SECRETS.add(value)


def redact(text: str) -> str:
    """``text`` with passcode headers and every registered secret replaced by ``***``."""
    with _SECRETS_LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "***")
    return _PASSCODE.sub(r"\1***", text)


class RedactingFilter(logging.Filter):
    """Rewrites a log record's message (and traceback text) with :func:`redact`."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


STOMP_LOGGER = "stomp.py"


class QuietTlsShutdown(logging.Filter):
    """Demote stomp.py's WARNING on a TLS close without ``close_notify`` to DEBUG.

    After the RECEIPT of a DISCONNECT the broker closes the TCP connection without a TLS
    close_notify (Classic 5.18), so stomp.py's ``unwrap()`` in ``disconnect_socket``
    fails and logs "[SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation of protocol"
    as a WARNING on every clean TLS disconnect: noise that hides real warnings.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and record.funcName == "disconnect_socket":
            if "UNEXPECTED_EOF_WHILE_READING" in str(record.msg):
                record.levelno, record.levelname = logging.DEBUG, "DEBUG"
                return logging.getLogger(STOMP_LOGGER).isEnabledFor(logging.DEBUG)
        return True


def install_log_redaction() -> None:
    """Put one :class:`RedactingFilter` (and :class:`QuietTlsShutdown`) on stomp.py's logger."""
    logger = logging.getLogger(STOMP_LOGGER)
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())
    if not any(isinstance(f, QuietTlsShutdown) for f in logger.filters):
        logger.addFilter(QuietTlsShutdown())


install_log_redaction()
