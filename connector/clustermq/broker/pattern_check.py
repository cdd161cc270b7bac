"""The cluster says whether it can read the source's queue patterns before anything subscribes.

Subscribing is what would do the harm: on a broker without queue patterns (Artemis) a wildcard
SUBSCRIBE creates a queue of its own that collects copies from then on, and nothing reports an
error. With ``flavor=auto`` the product is known only from a node's CONNECTED frame, so the first
node that answers is asked, once, as for a selector (broker/selector_check.py).
"""

from __future__ import annotations

from clustermq.broker.connection_options import ConnectionOptions
from clustermq.broker.dialect import configured_dialect
from clustermq.broker.queue_names import queue_patterns
from clustermq.broker.session import first_answering_node


def check_queue_patterns(connection: ConnectionOptions, purpose: str) -> None:
    """Raise :class:`OptionError` when ``connection.queues`` has a pattern its broker cannot
    read; ``purpose`` completes "no broker node is reachable ..." when a node must be asked."""
    if not queue_patterns(connection.queues) or configured_dialect(connection.flavor) is not None:
        return  # a configured flavor's dialect checked them when the read options were parsed
    with first_answering_node(connection.nodes, connection, purpose) as session:
        session.dialect.check_queue_patterns(connection.queues, where=f"broker node {session.node.name}: ")
