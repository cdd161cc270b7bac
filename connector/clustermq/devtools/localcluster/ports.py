"""Choosing TCP ports for broker nodes.

Fixed well-known ports (61613, 61616) are often taken on a developer machine or a CI runner, so
by default the kernel picks free ports (bind to port 0), a STOMP port and the next one for peers. A ``base_port`` gives a predictable
layout instead: node *i* listens for STOMP on ``base + 10*i`` and for its peers on
``base + 10*i + 1``.
"""

from __future__ import annotations

import socket
from contextlib import ExitStack

HOST = "127.0.0.1"
PORT_STRIDE = 10


def free_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct ports that were free a moment ago (all held open while choosing)."""
    with ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def free_port_pairs(count: int, host: str = HOST) -> list[tuple[int, int]]:
    """``count`` pairs ``(p, p + 1)`` of ports that were free a moment ago (all held open).

    Adjacent, so a node's peer port is its STOMP port plus one on every node: the convention
    cluster discovery relies on (clustermq.broker.discovery).
    """
    with ExitStack() as stack:
        pairs: list[tuple[int, int]] = []
        while len(pairs) < count:
            low = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            low.bind((host, 0))
            port = low.getsockname()[1]
            if port >= 65535:
                continue
            high = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                high.bind((host, port + 1))
            except OSError:
                continue
            pairs.append((port, port + 1))
        return pairs


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a listening socket could bind ``host:port`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM does
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def node_ports(nodes: int, base_port: int | None, host: str = HOST) -> list[tuple[int, int]]:
    """(STOMP port, peer port) per node, dynamic or from ``base_port``; checked to be free."""
    if base_port is None:
        return free_port_pairs(nodes, host)
    pairs = [(base_port + PORT_STRIDE * i, base_port + PORT_STRIDE * i + 1) for i in range(nodes)]
    if pairs[-1][1] > 65535 or base_port < 1:
        raise ValueError(f"base port {base_port} leaves no room for {nodes} nodes (needs up to {pairs[-1][1]})")
    busy = [port for pair in pairs for port in pair if not port_is_free(port, host)]
    if busy:
        raise RuntimeError(
            f"ports already in use on {host}: {', '.join(map(str, busy))} "
            f"(base port {base_port}); pick another --base-port or omit it for dynamic ports"
        )
    return pairs


def amqp_ports(count: int, base_port: int | None, taken: list[tuple[int, int]],
               host: str = HOST) -> list[int]:
    """An AMQP port per node (the reader's opt-in ``transport=amqp``): ``base + 10*i + 2`` with
    ``base_port``, else free ports other than the ``taken`` STOMP and peer ports."""
    if base_port is not None:
        ports = [base_port + PORT_STRIDE * i + 2 for i in range(count)]
        busy = [port for port in ports if port > 65535 or not port_is_free(port, host)]
        if busy:
            raise RuntimeError(f"AMQP ports not free on {host}: {', '.join(map(str, busy))} "
                               f"(base port {base_port}); pick another --base-port")
        return ports
    avoid = {port for pair in taken for port in pair}
    while True:
        ports = free_ports(count, host)
        if not avoid.intersection(ports):
            return ports
