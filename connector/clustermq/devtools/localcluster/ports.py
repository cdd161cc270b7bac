"""Choosing TCP ports for broker nodes.

Fixed well-known ports (61613, 61616) are often taken on a developer machine or a CI runner, so
by default the kernel picks free ports (bind to port 0), a STOMP port and the next one for peers. A ``base_port`` gives a predictable
layout instead: node *i* listens for STOMP on ``base + 10*i`` and for its peers on
``base + 10*i + 1``.

A port chosen here is free when chosen and taken only when the broker starts, seconds later.
Two processes choosing at once on one machine (the test suite's parallel workers, each starting
clusters) could both be handed a port the kernel freed in between; ``CLUSTERMQ_PORT_RANGE``
(``LOW-HIGH``) gives a process a range of its own to choose from instead, walked from a random
start so that processes sharing a range rarely meet.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Iterator
from contextlib import ExitStack

HOST = "127.0.0.1"
PORT_STRIDE = 10
PORT_RANGE_ENV = "CLUSTERMQ_PORT_RANGE"

#: where the walk through ``CLUSTERMQ_PORT_RANGE`` stands, per range: a port handed out is not
#: handed out again until the walk has gone round the whole range
_cursors: dict[range, int] = {}


def port_range() -> range | None:
    """The ports ``CLUSTERMQ_PORT_RANGE`` allows (``None``: unset, the kernel chooses)."""
    raw = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not raw:
        return None
    low, _, high = raw.partition("-")
    try:
        ports = range(int(low), int(high) + 1)
    except ValueError:
        ports = range(0)
    if len(ports) < 2 or ports.start < 1 or ports.stop > 65536:
        raise ValueError(f"{PORT_RANGE_ENV}={raw!r}: use LOW-HIGH, two ports 1-65535 with LOW < HIGH")
    return ports


def _candidates(ports: range | None) -> Iterator[int]:
    """Ports to try binding: 0 (the kernel's choice) without a range, else the range once round."""
    if ports is None:
        while True:
            yield 0
    cursor = _cursors.get(ports, random.randrange(len(ports)))
    for _ in range(len(ports)):
        cursor = (cursor + 1) % len(ports)
        _cursors[ports] = cursor
        yield ports[cursor]
    raise RuntimeError(f"{PORT_RANGE_ENV}: no free port left in {ports.start}-{ports.stop - 1}")


def _bind(stack: ExitStack, host: str, port: int) -> int | None:
    """Bind ``port`` (0: any) and hold it in ``stack``; the port bound, or None if taken."""
    sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    try:
        sock.bind((host, port))
    except OSError:
        return None
    return int(sock.getsockname()[1])


def free_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct ports that were free a moment ago (all held open while choosing)."""
    with ExitStack() as stack:
        ports: list[int] = []
        candidates = _candidates(port_range())
        while len(ports) < count:
            port = _bind(stack, host, next(candidates))
            if port is not None:
                ports.append(port)
        return ports


def free_port_pairs(count: int, host: str = HOST) -> list[tuple[int, int]]:
    """``count`` pairs ``(p, p + 1)`` of ports that were free a moment ago (all held open).

    Adjacent, so a node's peer port is its STOMP port plus one on every node: the convention
    cluster discovery relies on (clustermq.broker.discovery).
    """
    allowed = port_range()
    with ExitStack() as stack:
        pairs: list[tuple[int, int]] = []
        candidates = _candidates(allowed)
        while len(pairs) < count:
            port = _bind(stack, host, next(candidates))
            if port is None or port >= 65535 or (allowed is not None and port + 1 not in allowed):
                continue
            if _bind(stack, host, port + 1) is not None:
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
