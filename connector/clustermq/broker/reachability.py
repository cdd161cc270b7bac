"""Why a node cannot be connected to, in one of five words: refused, DNS, timeout, TLS, login.

stomp.py reports every failed connect the same way (a bare ``ConnectFailedException``; the
socket error goes only to its log), and proton reports its own texts. The fix differs with the
cause (start the broker, correct the host name, open the firewall, give the right CA, give the
right password), so a failed attempt is diagnosed here once, for every path that connects:
the name is resolved, a TCP connection tried, and for a ``stomp+ssl://`` node the handshake
repeated, each bounded by the caller's timeout. This runs only after an attempt failed, so a
healthy connection never pays for it.

The raw reason (the socket's or the TLS library's words) is kept next to the kind; neither ever
holds the password.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterable

from clustermq.broker.nodes import Node
from clustermq.broker.stomp_tls import tls_failure
from clustermq.errors import DNS, LOGIN, REFUSED, TIMEOUT, TLS, NodeUnavailable, NoNodeReachable

#: a failed connect that took this share of the socket timeout (or more) ran into it
TIMED_OUT_SHARE = 0.9
#: longest wait of the TCP probe that tells a TLS handshake's silence from a TCP connect's
TLS_PROBE_S = 2.0


def tcp_failure(host: str, port: int, timeout: float) -> tuple[str, str] | None:
    """``(kind, reason)`` when ``host:port`` takes no TCP connection; ``None`` when it does."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return DNS, f"the host name '{host}' does not resolve ({exc.strerror or exc})"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return TIMEOUT, (f"no TCP connection to {host}:{port} within {timeout:.1f} s "
                         "(option connectTimeout): the host does not answer, or a firewall drops it")
    except ConnectionRefusedError as exc:
        return REFUSED, f"nothing accepts connections at {host}:{port} ({exc})"
    except OSError as exc:
        return REFUSED, f"the network refused the connection to {host}:{port} ({exc})"


def connect_failure(node: Node, timeout: float, elapsed: float, error: BaseException) -> NodeUnavailable:
    """The error for a connect (TCP, then TLS for ``stomp+ssl://``) that failed after
    ``elapsed`` s with ``error``, bounded by the socket ``timeout``."""
    if elapsed >= TIMED_OUT_SHARE * timeout:
        # The attempt ran into its timeout (stomp.py also sleeps ~0.2 s after a failed attempt,
        # so a tiny timeout gets here too): a short probe tells a fast refusal from the rest.
        probe = tcp_failure(node.host, node.port, min(timeout, TLS_PROBE_S))
        if probe is not None and probe[0] in (DNS, REFUSED):
            return NodeUnavailable(node, probe[1], probe[0])
        if node.ssl and probe is None:
            worded = tls_failure(node, min(timeout, TLS_PROBE_S))  # a handshake that fails fast
            if worded is not None:
                return NodeUnavailable(node, worded, TLS)
            return NodeUnavailable(node, (
                f"no TLS handshake answer within {timeout:.1f} s (option connectTimeout): the "
                "port takes TCP connections but does not answer TLS; a plain STOMP port "
                "(write it stomp://, not stomp+ssl://) or a stalled node"), TLS)
        return NodeUnavailable(node, (
            f"no TCP connection within {timeout:.1f} s (option connectTimeout): the host does "
            "not answer, or a firewall drops the connection"), TIMEOUT)
    found = tcp_failure(node.host, node.port, timeout)
    if found is not None:
        kind, reason = found
        return NodeUnavailable(node, reason, kind)
    tls = tls_failure(node, timeout)
    if tls is not None:
        return NodeUnavailable(node, tls, TLS)
    return NodeUnavailable(node, (
        f"the connection failed ({type(error).__name__}) but a second attempt connected: the "
        "node may be starting or overloaded"), REFUSED)


def closed_during_login(node: Node, timeout: float) -> NodeUnavailable:
    """The error for a node that closed the connection after CONNECT without an ERROR frame.

    A TLS-only port does that to a plain-text CONNECT; told apart by a handshake that checks
    nothing (only whether the port speaks TLS at all).
    """
    if not node.ssl and _speaks_tls(node, timeout):
        return NodeUnavailable(node, (
            "the port speaks TLS and closed the plain-text connection: write the node as "
            f"stomp+ssl://{node.host}:{node.port} (with sslCaFile)"), TLS)
    return NodeUnavailable(node, "login failed: the node closed the connection during the login "
                                 "without an ERROR frame", LOGIN)


def _speaks_tls(node: Node, timeout: float) -> bool:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((node.host, node.port), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=node.host):
                return True
    except (OSError, ValueError):
        return False


def amqp_failure(endpoint: Node, reason: str, timeout: float) -> tuple[str, str]:
    """``(kind, reason)`` for an AMQP attempt at ``endpoint`` (a node's ``amqpBrokers``
    address) that failed with proton's ``reason``."""
    lowered = reason.lower()
    if "unauthorized" in lowered or "sasl" in lowered or "authentication" in lowered:
        return LOGIN, f"{endpoint.host}:{endpoint.port}: login failed: {reason}"
    found = tcp_failure(endpoint.host, endpoint.port, timeout)
    if found is not None:
        return found[0], f"{endpoint.host}:{endpoint.port} (amqpBrokers): {found[1]}"
    return TIMEOUT if "within" in lowered else REFUSED, f"{endpoint.host}:{endpoint.port}: {reason}"


def group_kind(failures: Iterable[NodeUnavailable]) -> str | None:
    """One kind for a failover group whose members all failed: theirs when they agree, else the
    one that most needs the user's action (a login or TLS problem hides behind a standby's
    refusal: a standby listens on no port)."""
    kinds = {f.kind for f in failures}
    if len(kinds) == 1:
        return kinds.pop()
    for kind in (LOGIN, TLS, DNS, TIMEOUT, REFUSED):
        if kind in kinds:
            return kind
    return None


def no_node_reachable(purpose: str, failures: Iterable[NodeUnavailable]) -> NoNodeReachable:
    """``NoNodeReachable`` naming every node with its kind and reason; ``purpose`` completes
    "no broker node is reachable ..." (e.g. "for writing to queue 'q'")."""
    failed = list(failures)
    listed = "; ".join(str(f) for f in failed) or "no node answered"
    return NoNodeReachable(f"clustermq: no broker node is reachable {purpose} (option brokers): "
                           f"{listed}", failed)
