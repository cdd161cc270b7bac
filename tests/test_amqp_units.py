"""The opt-in AMQP transport's options and message conversion, without brokers."""

from __future__ import annotations

import pytest
from proton import Message

from clustermq.broker.dialect import AMQP_DIALECTS, resolve_amqp_dialect
from clustermq.errors import OptionError
from clustermq.options import ReadOptions
from clustermq.read.amqp_message import message_fields

BASE = {"brokers": "a:61613,masterslave:(b:61613,c:61613)", "queue": "q"}


def test_transport_is_parsed_once_with_each_node_s_amqp_endpoint() -> None:
    options = ReadOptions.parse({**BASE, "transport": "amqp", "amqpBrokers": "a:5672,masterslave:(b:5672,c:5672)"})
    assert options.transport == "amqp"
    assert options.amqp_node("a:61613").port == 5672
    pair = options.amqp_node("masterslave:(b:61613,c:61613)")
    assert [(m.host, m.port) for m in pair.members] == [("b", 5672), ("c", 5672)]
    assert ReadOptions.parse(BASE).transport == "stomp"


@pytest.mark.parametrize("extra, message", [
    ({"transport": "amqp10"}, "option 'transport': 'amqp10' is not allowed; allowed: stomp, amqp"),
    ({"transport": "amqp"}, "option 'amqpBrokers': is required with transport=amqp"),
    ({"amqpBrokers": "a:5672,b:5672"}, "option 'amqpBrokers': is only read with transport=amqp"),
    ({"transport": "amqp", "amqpBrokers": "a:5672,b:5672"}, "shaped [node, node]; 'brokers' has 2 shaped [node, pair of 2]"),
    ({"transport": "amqp", "amqpBrokers": "a:5672,masterslave:(b:5672,c:5672)", "discovery": "cluster"},
     "not supported with discovery=cluster"),
    ({"transport": "amqp", "amqpBrokers": "stomp+ssl://a:5672,masterslave:(b:5672,c:5672)"},
     "option 'amqpBrokers': TLS is not supported"),
    ({"includeDeliveryCount": "true"},
     "option 'includeDeliveryCount': needs transport=amqp (it is 'stomp'): the brokers' STOMP "
     "frames carry no delivery count, only 'redelivered'"),
    ({"includeDeliveryCount": "sometimes"}, "option 'includeDeliveryCount'"),
])
def test_bad_transport_options_name_the_option_and_what_is_allowed(extra: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as info:
        ReadOptions.parse({**BASE, **extra})
    assert message in str(info.value)


def test_an_amqp_message_reads_like_a_stomp_frame() -> None:
    """The JMS message id, the group and the properties land where the STOMP path has them;
    a text body is UTF-8, a binary one byte for byte."""
    text = Message(id="ID:p-1:1:1:1:7", group_id="gA", group_sequence=3, priority=6, durable=True,
                   creation_time=1700000000.123, body="héllo", properties={"count": 6, "ok": True})
    text.delivery_count = 1
    headers, body = message_fields(text, "/queue/q")
    assert body == "héllo".encode()
    assert headers["message-id"] == "ID:p-1:1:1:1:7" and headers["JMSXGroupID"] == "gA"
    assert headers["JMSXGroupSeq"] == "3" and headers["priority"] == "6"
    assert headers["timestamp"] == "1700000000123" and headers["persistent"] == "true"
    assert headers["redelivered"] == "true" and headers["count"] == "6" and headers["ok"] == "true"
    assert headers["destination"] == "/queue/q"
    assert headers["JMSXDeliveryCount"] == "2"  # AMQP counts the attempts before this one
    _, raw = message_fields(Message(body=b"\x00\xff"), "q")
    assert raw == b"\x00\xff"
    for dialect in AMQP_DIALECTS.values():
        assert dialect.message_id(headers, "n") == "ID:p-1:1:1:1:7"
        assert dialect.group_id(headers, "clustermq_group") == "gA"
        assert not dialect.hides_jms_group  # the group is visible: no group slots over AMQP


def test_the_amqp_dialect_comes_from_the_open_frame_s_product() -> None:
    assert resolve_amqp_dialect("auto", "apache-activemq-artemis").amqp_source("q") == ("q", ("queue",))
    assert resolve_amqp_dialect("auto", "ActiveMQ").amqp_source("q") == ("queue://q", ())


def test_the_delivery_count_column_is_added_last_only_when_asked_for() -> None:
    """``includeDeliveryCount`` adds ``delivery_count`` after every other column (so the others
    keep their places in a table written before), filled from the AMQP header, 1 the first time."""
    from clustermq.read.messages import BufferedMessage
    from clustermq.read.schema import READ_SCHEMA_DDL, read_schema_ddl, to_record_batch

    amqp = {**BASE, "transport": "amqp", "amqpBrokers": "a:5672,masterslave:(b:5672,c:5672)"}
    assert not ReadOptions.parse(amqp).include_delivery_count
    asked = ReadOptions.parse({**amqp, "INCLUDEDELIVERYCOUNT": "true"})
    assert asked.include_delivery_count
    assert read_schema_ddl(False) == READ_SCHEMA_DDL
    assert read_schema_ddl(True) == READ_SCHEMA_DDL + ", delivery_count int"
    rows = []
    for attempts in (None, 0, 3):
        message = Message(id=f"ID:p-1:1:1:1:{attempts}", body="x")
        if attempts is not None:
            message.delivery_count = attempts
        headers, body = message_fields(message, "q")
        rows.append(BufferedMessage(headers, body, None, 0, len(rows), seq=len(rows)))
    dialect = AMQP_DIALECTS["artemis"]
    batch, _ = to_record_batch("a:61613", rows, dialect, "clustermq_group", delivery_count=True)
    assert batch.schema.names[-2:] == ["body", "delivery_count"]
    assert batch.column("delivery_count").to_pylist() == [1, 1, 4]
    plain, _ = to_record_batch("a:61613", rows, dialect, "clustermq_group")
    assert plain.schema.names[-1] == "body"
