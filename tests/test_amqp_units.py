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
    _, raw = message_fields(Message(body=b"\x00\xff"), "q")
    assert raw == b"\x00\xff"
    for dialect in AMQP_DIALECTS.values():
        assert dialect.message_id(headers, "n") == "ID:p-1:1:1:1:7"
        assert dialect.group_id(headers, "clustermq_group") == "gA"
        assert not dialect.hides_jms_group  # the group is visible: no group slots over AMQP


def test_the_amqp_dialect_comes_from_the_open_frame_s_product() -> None:
    assert resolve_amqp_dialect("auto", "apache-activemq-artemis").amqp_source("q") == ("q", ("queue",))
    assert resolve_amqp_dialect("auto", "ActiveMQ").amqp_source("q") == ("queue://q", ())
