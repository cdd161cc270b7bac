"""TLS to a ``stomp+ssl://`` node: stomp.py's settings, and the handshake error in words.

Every connection of the connector gets its TLS settings here, from the node itself
(:class:`~clustermq.broker.nodes.TlsSettings`), so the reader, writer, depth probe, browse and
staging mover check certificates the same way.
"""

from __future__ import annotations

import socket
import ssl
import warnings
from typing import Any

import stomp

from clustermq.broker import tls_transport
from clustermq.broker.nodes import Node, TlsSettings

# ssl.PROTOCOL_TLS is what lets stomp.py verify the chain but not the host name (see
# tls_parameters); Python deprecates the constant, the behaviour is what we want.
warnings.filterwarnings("ignore", message=r"ssl\.PROTOCOL_TLS is deprecated", category=DeprecationWarning)


#: OpenSSL's words for a peer that answered the ClientHello with something that is not TLS
NOT_TLS_REASONS = frozenset({"WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE",
                             "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST"})


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
    """Make ``conn`` speak TLS to ``node`` when the node is ``stomp+ssl://`` (no-op otherwise),
    with an end of stream and a close that stomp.py 9 gets wrong over TLS (``tls_transport``)."""
    if node.ssl:
        conn.set_ssl(**tls_parameters(node))
        tls_transport.install(conn)


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
        return f"the client's TLS set-up failed: {exc}"
    trust = f"sslCaFile {tls.ca_file}" if tls.ca_file else "the system trust store"
    try:
        with socket.create_connection((node.host, node.port), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=node.host):
                return None
    except ssl.SSLCertVerificationError as exc:
        detail = exc.verify_message or exc.reason or str(exc)
        return f"handshake failed: the broker's certificate failed verification ({detail}) against {trust}"
    except ssl.SSLError as exc:
        if exc.reason in NOT_TLS_REASONS:
            return (f"handshake failed ({exc.reason}): the port does not speak TLS; is it a plain "
                    "STOMP port (stomp:// instead of stomp+ssl://)?")
        return f"handshake failed: {exc.reason or exc}"
    except OSError:
        return None  # not a TLS problem: the caller reports the plain connection error
