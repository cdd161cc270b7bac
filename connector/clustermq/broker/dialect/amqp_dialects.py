"""The brokers read over AMQP 1.0 (the reader's opt-in ``transport=amqp``, read/amqp_link.py).

The AMQP link puts the message's own properties where the STOMP path finds them (the JMS
message id in ``message-id``, the group in ``JMSXGroupID``); what then differs from the broker's
STOMP dialect is here (docs/broker-behaviour.md, "AMQP 1.0 shows what STOMP hides"):

* Classic: the group's name is visible (STOMP drops JMSXGroupID), so no group slots are needed;
  a queue is addressed ``queue://<name>``.
* Artemis: ``message-id`` is the JMS message id (``ID:...``), the same on a redelivered copy and
  on every node, where STOMP's is the node's internal number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from clustermq.broker.dialect.artemis_dialect import ArtemisDialect
from clustermq.broker.dialect.classic_dialect import ClassicDialect


@dataclass(frozen=True, repr=False)
class ClassicAmqpDialect(ClassicDialect):
    """ActiveMQ Classic over AMQP 1.0: the group is visible."""

    hides_jms_group: bool = False

    def amqp_source(self, queue: str) -> tuple[str, tuple[str, ...]]:
        return f"queue://{queue}", ()


@dataclass(frozen=True, repr=False)
class ArtemisAmqpDialect(ArtemisDialect):
    """ActiveMQ Artemis over AMQP 1.0: the JMS message id, stable across nodes and redeliveries."""

    def message_id(self, headers: Mapping[str, str], node: str) -> str | None:
        return headers.get("message-id") or None
