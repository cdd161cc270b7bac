"""Opening one STOMP 1.2 connection to one node, with a bounded wait and a clear error.

stomp.py's own ``connect(wait=True)`` can wait forever and retries hosts itself; the connector
keeps its own node list and back-off, so here a connection is one attempt with a deadline.
"""

from __future__ import annotations

import logging
import re
import socket
import ssl
import threading
import time
import warnings
from typing import Any

import stomp
from stomp.exception import StompException

from clustermq.broker.nodes import Node, TlsSettings
from clustermq.broker.settings import ConnectionOptions
from clustermq.errors import NodeUnavailable

log = logging.getLogger("clustermq.connection")

HEARTBEAT_RECEIVE_SCALE = 2.5

# ----------------------------------------------------------------------------- secrets in logs

# stomp.py 9.0.0 logs every frame it sends at DEBUG ("sending frame: [b'CONNECT', ...,
# b'passcode:<password>\n', ...]"). Its own scrubber (utils.PASSCODE_RE, r"passcode:\s+...")
# wants whitespace after the colon, which a STOMP header never has, so the password is logged in
# clear (measured). The filter below is installed on stomp.py's one logger ("stomp.py") when this
# module is imported -- which every clustermq path that opens a connection does, in the driver
# and in Spark's Python workers -- and rewrites each record before any handler sees it.
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
    close_notify (measured on Classic 5.18), so stomp.py's ``unwrap()`` in ``disconnect_socket``
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

# ----------------------------------------------------------------------------- TLS

# ssl.PROTOCOL_TLS is what lets stomp.py verify the chain but not the host name (see
# tls_parameters); Python deprecates the constant, the behaviour is what we want.
warnings.filterwarnings("ignore", message=r"ssl\.PROTOCOL_TLS is deprecated", category=DeprecationWarning)


def tls_parameters(node: Node) -> dict[str, Any]:
    """Keyword arguments for stomp.py's ``set_ssl`` for ``node`` (``node.tls`` or the defaults).

    stomp.py 9 builds ``ssl.SSLContext(ssl_version)``, loads ``ca_certs`` (else the system trust
    store) and, with ``verify=True``, requires a valid chain; whether the host name is checked is
    the context's default for the protocol: on for ``PROTOCOL_TLS_CLIENT``, off for
    ``PROTOCOL_TLS``. The key-password callback refuses instead of letting OpenSSL prompt on a
    terminal (which would hang an executor).
    """
    tls = node.tls or TlsSettings()
    return {
        "for_hosts": [(node.host, node.port)],
        "ca_certs": tls.ca_file,
        "cert_file": tls.cert_file,
        "key_file": tls.key_file,
        "verify": True,
        "ssl_version": ssl.PROTOCOL_TLS_CLIENT if tls.verify_hostname else ssl.PROTOCOL_TLS,
        "password": _no_key_password,
    }


def _no_key_password() -> bytes:
    raise ssl.SSLError("the client private key (sslKeyFile) is encrypted; give an unencrypted key")


def apply_tls(conn: stomp.Connection12, node: Node) -> None:
    """Make ``conn`` speak TLS to ``node`` when the node is ``stomp+ssl://`` (no-op otherwise)."""
    if node.ssl:
        conn.set_ssl(**tls_parameters(node))


def tls_failure(node: Node, timeout: float) -> str | None:
    """Why a TLS handshake with ``node`` fails, in words; ``None`` when it succeeds or is not TLS.

    stomp.py logs the handshake error and raises a bare ``ConnectFailedException``; to name the
    cause in the error the user sees, the same handshake is tried once more here, with the same
    settings, and its ``SSLError`` is put into words.
    """
    if not node.ssl:
        return None
    tls = node.tls or TlsSettings()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = tls.verify_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        if tls.ca_file:
            context.load_verify_locations(tls.ca_file)
        else:
            context.load_default_certs()
        if tls.cert_file:
            context.load_cert_chain(tls.cert_file, tls.key_file, password=_no_key_password)
    except (ssl.SSLError, OSError) as exc:
        return f"TLS set-up failed: {exc}"
    trust = f"sslCaFile {tls.ca_file}" if tls.ca_file else "the system trust store"
    try:
        with socket.create_connection((node.host, node.port), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=node.host):
                return None
    except ssl.SSLCertVerificationError as exc:
        detail = exc.verify_message or exc.reason or str(exc)
        return f"TLS handshake failed: the broker's certificate failed verification ({detail}) against {trust}"
    except ssl.SSLError as exc:
        return f"TLS handshake failed: {exc.reason or exc}"
    except OSError:
        return None  # not a TLS problem: the caller reports the plain connection error


class _ConnectWaiter(stomp.ConnectionListener):
    """Turns stomp.py's callbacks into one event with the outcome of the CONNECT."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.connected_headers: dict[str, str] = {}
        self.error: str | None = None

    def on_connected(self, frame: Any) -> None:
        self.connected_headers = dict(frame.headers)
        self.done.set()

    def on_error(self, frame: Any) -> None:
        if not self.done.is_set():
            message = frame.headers.get("message", "")
            body = frame.body.decode("utf-8", "replace") if isinstance(frame.body, bytes) else str(frame.body)
            self.error = (message or body.strip().splitlines()[0] if body.strip() else "ERROR frame")
            self.done.set()

    def on_disconnected(self) -> None:
        if not self.done.is_set():
            self.error = self.error or "connection closed during login"
            self.done.set()


def open_connection(
    node: Node,
    options: ConnectionOptions,
    listener: stomp.ConnectionListener | None = None,
    listener_name: str = "clustermq",
) -> tuple[stomp.Connection12, dict[str, str]]:
    """Connect and log in to ``node``; return the connection and the CONNECTED headers.

    Bodies stay bytes (``auto_decode=False``): message bodies are binary in the schema.
    """
    heartbeat = options.heartbeat_ms
    # ActiveMQ Classic writes a keep-alive only when it wrote nothing during the last whole
    # interval, so gaps of up to twice the interval are normal; stomp.py's default of 1.5x
    # declared healthy nodes dead under load (measured), hence 2.5x.
    conn = stomp.Connection12(
        [(node.host, node.port)],
        reconnect_attempts_max=1,
        heartbeats=(heartbeat, heartbeat),
        heart_beat_receive_scale=HEARTBEAT_RECEIVE_SCALE,
        timeout=options.connect_timeout_s,
        auto_decode=False,
        prefer_localhost=False,
        try_loopback_connect=False,
    )
    apply_tls(conn, node)
    waiter = _ConnectWaiter()
    conn.set_listener("clustermq-connect", waiter)
    if listener is not None:
        conn.set_listener(listener_name, listener)
    username, password = options.login
    register_secret(password)
    try:
        conn.connect(username=username, passcode=password, wait=False)
    except (StompException, OSError) as exc:
        _quiet_disconnect(conn)
        reason = tls_failure(node, options.connect_timeout_s)
        raise NodeUnavailable(node, reason or f"cannot connect ({type(exc).__name__})") from None
    if not waiter.done.wait(options.connect_timeout_s):
        _quiet_disconnect(conn)
        raise NodeUnavailable(
            node, f"no CONNECTED frame within {options.connect_timeout_s:.1f} s"
        )
    if waiter.error is not None or not conn.is_connected():
        _quiet_disconnect(conn)
        reason = waiter.error or "connection refused"
        if password:
            reason = reason.replace(password, "***")
        raise NodeUnavailable(node, f"login failed: {reason}")
    conn.remove_listener("clustermq-connect")
    if options.heartbeat_ms:
        _send_heartbeats_early(conn)
    return conn, waiter.connected_headers


def _send_heartbeats_early(conn: stomp.Connection12, wait_s: float = 1.0) -> None:
    """Send our heart-beats at half the interval promised in CONNECT.

    ActiveMQ Classic closes a STOMP connection when it read nothing for exactly the client's
    promised interval (``transport.hbGracePeriodMultiplier`` defaults to 1.0: "Channel was
    inactive for too (>1000) long" in the broker log), while stomp.py sends its keep-alive at
    exactly that interval, so any scheduling delay in this process makes the broker drop a
    healthy connection (measured: a direct node dropped at query start on a loaded machine).
    STOMP allows sending more often than promised. stomp.py sets ``send_sleep`` in its own
    ``on_connected``, which runs after ours (listeners are called in name order), hence the
    short wait for it.
    """
    deadline = time.monotonic() + wait_s
    while not getattr(conn, "send_sleep", 0):
        if time.monotonic() > deadline or not conn.is_connected():
            return  # the broker refused heart-beats (0,0) or the connection is gone
        time.sleep(0.005)
    conn.send_sleep = conn.send_sleep / 2


def _quiet_disconnect(conn: stomp.Connection12, grace_s: float = 2.0) -> None:
    """DISCONNECT politely, then close the socket after ``grace_s`` whatever happened.

    stomp.py's ``transport.stop()`` waits for the DISCONNECT receipt with no deadline, which
    hangs forever on a node that stalls with its socket open.
    """
    try:
        if conn.is_connected():
            conn.disconnect()
            deadline = time.monotonic() + grace_s
            while conn.is_connected() and time.monotonic() < deadline:
                time.sleep(0.02)
    except Exception:
        pass
    try:
        conn.transport.disconnect_socket()
    except Exception:
        pass


def close_connection(conn: stomp.Connection12 | None) -> None:
    """Close without acknowledging: unacknowledged messages go back to the broker."""
    if conn is not None:
        _quiet_disconnect(conn)
