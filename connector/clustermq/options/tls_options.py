"""The TLS options (``sslCaFile`` ... ``sslVerifyHostname``), checked together on the driver."""

from __future__ import annotations

import ssl
from collections.abc import Mapping

from clustermq.broker.nodes import Node, TlsSettings
from clustermq.errors import OptionError
from clustermq.options.table import (
    SSL_CA_FILE,
    SSL_CERT_FILE,
    SSL_KEY_FILE,
    SSL_VERIFY_HOSTNAME,
    TLS_OPTIONS,
)


def _refuse_key_prompt() -> bytes:
    raise SSL_KEY_FILE.error("the private key is encrypted; give an unencrypted key")


def parse_tls(raw: Mapping[str, str], nodes: tuple[Node, ...]) -> TlsSettings | None:
    """The TLS settings for the ``stomp+ssl://`` nodes; ``None`` when no node uses TLS.

    TLS options with no ``stomp+ssl://`` node are an error, not a warning: a user who sets a CA
    file believes the connection is encrypted, and a silent plain-text connection (with the
    password on the wire) is the failure that must not go unnoticed. Files are checked here, on
    the driver, so a typo fails ``load()``/``save()`` naming the option instead of every task.
    """
    given = [option.name for option in TLS_OPTIONS if option.given(raw)]
    if not any(node.ssl for node in nodes):
        if given:
            raise OptionError(
                f"option '{given[0]}' is set but no node in 'brokers' uses TLS; write the nodes "
                "as stomp+ssl://host:port (or drop the ssl options)"
            )
        return None
    ca_file = SSL_CA_FILE.read(raw)
    cert_file = SSL_CERT_FILE.read(raw)
    key_file = SSL_KEY_FILE.read(raw)
    if key_file and not cert_file:
        raise OptionError(f"option '{SSL_KEY_FILE.name}' is set but '{SSL_CERT_FILE.name}' is not")
    if ca_file:
        try:
            ssl.create_default_context(cafile=ca_file)
        except (ssl.SSLError, ValueError) as exc:
            raise SSL_CA_FILE.error(f"'{ca_file}' holds no usable PEM certificate ({exc})") from None
    if cert_file:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert_file, key_file, password=_refuse_key_prompt)
        except ssl.SSLError as exc:
            which = SSL_KEY_FILE if key_file else SSL_CERT_FILE
            raise which.error(
                f"cannot load the client certificate and key ({exc.reason or exc})"
            ) from None
    return TlsSettings(
        ca_file=ca_file,
        cert_file=cert_file,
        key_file=key_file,
        verify_hostname=SSL_VERIFY_HOSTNAME.read(raw),
    )
