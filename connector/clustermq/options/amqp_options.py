"""``amqpBrokers``: where each node of ``brokers`` takes AMQP 1.0 (the reader's ``transport=amqp``).

Named per node rather than derived from the STOMP port: brokers put AMQP wherever their
configuration says (the products' defaults are 5672 and 61613, the local cluster's ports are
dynamic). The nodes keep their ``brokers`` names (offset keys, ``node`` column), so switching the
transport keeps a checkpoint's offsets.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from clustermq.broker.nodes import Node, parse_nodes
from clustermq.errors import OptionError
from clustermq.options.table import AMQP_BROKERS, BROKERS, TRANSPORT


def parse_amqp_nodes(raw: Mapping[str, str], nodes: tuple[Node, ...], transport: str,
                     discovery: str) -> tuple[tuple[str, Node], ...]:
    """``(brokers node name, AMQP endpoint)`` per node; () unless ``transport=amqp``."""
    text = AMQP_BROKERS.read(raw)
    if transport != "amqp":
        if text is not None:
            raise AMQP_BROKERS.error(f"is only read with {TRANSPORT.name}=amqp (it is '{transport}')")
        return ()
    check_proton()
    if not text or not text.strip():
        raise AMQP_BROKERS.error(f"is required with {TRANSPORT.name}=amqp: the AMQP host:port of "
                                 f"every node of '{BROKERS.name}', in the same order")
    if discovery != "none":
        raise TRANSPORT.error("amqp needs every node listed (amqpBrokers); it is not "
                              "supported with discovery=cluster")
    if any(member.ssl for node in nodes for member in node.members or (node,)):
        raise TRANSPORT.error("amqp has no TLS: the AMQP link would be plain text while "
                              "'brokers' asks for stomp+ssl; use transport=stomp")
    try:
        amqp = parse_nodes(text, AMQP_BROKERS.name)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    if any(member.ssl for node in amqp for member in node.members or (node,)):
        raise AMQP_BROKERS.error("TLS is not supported; give plain host:port endpoints")
    if len(amqp) != len(nodes) or any(len(a.members) != len(n.members) for a, n in zip(amqp, nodes)):
        raise AMQP_BROKERS.error(
            f"lists {len(amqp)} node(s) shaped {_shape(amqp)}; '{BROKERS.name}' has {len(nodes)} "
            f"shaped {_shape(nodes)}: give one AMQP endpoint per node and per pair member, in order")
    return tuple((n.name, a) for n, a in zip(nodes, amqp))


def check_proton() -> None:
    """``transport=amqp`` needs python-qpid-proton, an optional extra: without it the read fails
    here, while its options are parsed, naming the option and the install command (rather than
    with an ``ImportError`` from inside a running query). Only this check and the AMQP link and
    browse import proton, so a STOMP-only installation never needs it."""
    try:
        importlib.import_module("proton")
    except ImportError as exc:
        raise TRANSPORT.error(
            f"amqp needs python-qpid-proton, which cannot be imported here ({exc}): install it "
            "with pip install 'clustermq[amqp]', or use transport=stomp (the default)"
        ) from None


def _shape(nodes: tuple[Node, ...]) -> str:
    return "[" + ", ".join(f"pair of {len(n.members)}" if n.members else "node" for n in nodes) + "]"
