"""A node judges the ``selector`` option before the connector consumes anything with it.

The grammar is the broker's (Classic and Artemis accept different identifiers and functions), so
it is not parsed here. Left to the reader's subscriptions, a selector the broker refuses would
be an ERROR on every node's SUBSCRIBE, each taken for a lost node and retried until
``noNodeTimeout``; asked once up front, on a destination that holds nothing (the dialects'
``selector_probe``), the refusal is an option error at the start of the query or read.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from clustermq.broker.connection_options import ConnectionOptions
from clustermq.broker.frames import body_text
from clustermq.broker.listener import Inbox
from clustermq.broker.request import Requester
from clustermq.broker.session import first_answering_node
from clustermq.errors import DepthError, NodeUnavailable, OptionError

#: the STOMP SUBSCRIBE header that carries a JMS selector, on both flavors
SELECTOR_HEADER = "selector"


def selector_headers(selector: str | None) -> dict[str, str]:
    """SUBSCRIBE headers that apply ``selector`` (none without one)."""
    return {SELECTOR_HEADER: selector} if selector else {}


class _ErrorDetail(Inbox):
    """An inbox that also keeps the ERROR frame's body: Classic names the exception there
    (``javax.jms.InvalidSelectorException: ...``) and puts only the selector in ``message``."""

    detail: str = ""

    def on_error(self, frame: Any) -> None:
        lines = body_text(frame).strip().splitlines()
        self.detail = lines[0] if lines else ""
        super().on_error(frame)


def check_selector(connection: ConnectionOptions, selector: str, purpose: str) -> None:
    """Raise :class:`OptionError` naming ``selector`` and the broker's reason when the first
    node that answers refuses it. ``purpose`` completes "no broker node is reachable ..."."""
    with first_answering_node(connection.nodes, connection, purpose) as session:
        inbox = _ErrorDetail()
        session.conn.set_listener("clustermq-selector", inbox)
        requests = Requester(session.conn, inbox, time.monotonic() + connection.connect_timeout_s)
        token = uuid.uuid4().hex
        destination, headers = session.dialect.selector_probe(token)
        try:
            requests.subscribe(destination, f"selector-{token}",
                               {**headers, **selector_headers(selector)})
        except DepthError as exc:
            if inbox.error is None:  # no verdict: the node went away or did not answer
                raise NodeUnavailable(session.node, f"while checking option 'selector': {exc}") from None
            reason = inbox.error
            if inbox.detail and inbox.detail not in reason:
                reason = f"{reason} ({inbox.detail})"
            raise OptionError(f"option 'selector': broker node {session.node.name} "
                              f"({session.dialect.product}) refused {selector!r}: {reason}") from None
        requests.unsubscribe(f"selector-{token}")
