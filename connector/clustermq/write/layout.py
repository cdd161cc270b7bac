"""The writer's input columns: which column plays which part, checked once on the driver.

A bad column fails ``save()``/``start()`` naming the column and what is allowed, before any
task runs; a row that cannot become a message is the task's to report
(:mod:`clustermq.write.message_builder`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from clustermq.errors import InputError
from clustermq.options import WriteOptions
from clustermq.write.headers import CLUSTERMQ_PREFIX

#: the columns the writer understands; anything else is an error or (headersFromColumns) a header
WRITE_COLUMNS = ("body", "group_id", "headers", "priority", "destination", "ttl", "correlation_id",
                 "reply_to", "type")
#: the columns that set a JMS header, and the STOMP header each sets (both brokers map these to
#: JMSExpiration, JMSCorrelationID, JMSReplyTo and JMSType)
JMS_HEADER_COLUMNS = {"ttl": "expires", "correlation_id": "correlation-id", "reply_to": "reply-to",
                      "type": "type"}

INTEGRAL_TYPES = (ByteType, ShortType, IntegerType, LongType)
#: the column types headersFromColumns turns into header text
HEADER_VALUE_TYPES = INTEGRAL_TYPES + (
    StringType, BooleanType, FloatType, DoubleType, DecimalType, DateType, TimestampType,
    TimestampNTZType,
)
#: header names a row may not set: STOMP frame headers, ones the writer sets from columns or
#: options, and the connector's own
RESERVED_HEADERS = frozenset(
    {
        "destination", "transaction", "receipt", "receipt-id", "content-length", "message-id",
        "subscription", "ack", "id", "redelivered", "timestamp", "persistent", "priority",
        "jmsxgroupid", "_amq_group_id", "_amq_dupl_id", "destination-type",
    }
)
#: each role's accepted column types, and how an error message describes them
ROLE_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "group_id": ((StringType,) + INTEGRAL_TYPES, "string (or an integer type)"),
    "headers": ((MapType,), "map<string,string>"),
    "priority": (INTEGRAL_TYPES, "an integer type (0-9)"),
    "destination": ((StringType,), "string (a queue name)"),
    "ttl": (INTEGRAL_TYPES, "an integer type (milliseconds to live)"),
    "correlation_id": ((StringType,), "string"),
    "reply_to": ((StringType,), "string (a queue name)"),
    "type": ((StringType,), "string"),
}


@dataclass(frozen=True)
class InputLayout:
    """Which input column plays which part (actual column names, as Spark passes them)."""

    body: str
    body_is_text: bool
    group_id: str | None = None
    headers: str | None = None
    priority: str | None = None
    destination: str | None = None
    header_columns: tuple[str, ...] = ()
    ttl: str | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    jms_type: str | None = None

    def jms_headers(self) -> frozenset[str]:
        """The STOMP headers this input's JMS header columns set (a row's ``headers`` map may not
        set them too)."""
        roles = {"ttl": self.ttl, "correlation_id": self.correlation_id, "reply_to": self.reply_to,
                 "type": self.jms_type}
        return frozenset(JMS_HEADER_COLUMNS[role] for role, column in roles.items() if column)


def _type_name(data_type: DataType) -> str:
    return data_type.simpleString()


def check_header_name(name: str, group_header: str) -> str | None:
    """Why ``name`` cannot be a user header, or ``None`` if it can."""
    # stomp.py (9.0) escapes header values but not names: a '\\' in a name goes out raw, and
    # Artemis (2.40.0) refuses the frame ("AMQ339040 Undefined escape sequence").
    if not name or any(c in name for c in ":\r\n\\"):
        return ("is not a valid STOMP header name (empty, or contains ':', '\\' or a line "
                "break)")
    lowered = name.lower()
    if lowered in RESERVED_HEADERS or lowered == group_header.lower():
        return "is reserved (set by the writer from a column or an option)"
    if lowered.startswith(CLUSTERMQ_PREFIX):
        return f"is reserved (the '{CLUSTERMQ_PREFIX}' prefix belongs to the connector)"
    return None


def _role_column(role: str, field: Any) -> str:
    """``field``'s name if its type suits ``role``; ``InputError`` naming it if not."""
    types, expected = ROLE_TYPES[role]
    ok = isinstance(field.dataType, types)
    if ok and role == "headers":
        ok = isinstance(field.dataType.keyType, StringType) and isinstance(field.dataType.valueType, StringType)
    if not ok:
        raise InputError(
            f"input column '{field.name}' must be {expected}, not {_type_name(field.dataType)}"
        )
    return str(field.name)


def input_layout(schema: StructType, options: WriteOptions) -> InputLayout:
    """Check the DataFrame's columns on the driver; raise ``InputError`` naming the column
    (the fix is in the DataFrame, not in an option)."""
    by_name: dict[str, Any] = {}
    for f in schema.fields:
        by_name[f.name.lower()] = f
    if "body" not in by_name:
        raise InputError(
            "the clustermq writer needs a 'body' column (binary or string); input columns: "
            + ", ".join(f.name for f in schema.fields)
        )
    body = by_name["body"]
    if not isinstance(body.dataType, (BinaryType, StringType)):
        raise InputError(
            f"input column '{body.name}' must be binary or string, not {_type_name(body.dataType)}"
        )
    roles = {role: _role_column(role, by_name[role]) if role in by_name else None for role in ROLE_TYPES}
    topic = options.connection.topic
    if topic is not None and roles["destination"] is not None:
        raise InputError(
            f"input column '{roles['destination']}' routes rows to queues, but option 'topic' sends "
            f"every row to topic '{topic.topic}'; drop the column, or write to a queue")
    extra = [f for f in schema.fields if f.name.lower() not in WRITE_COLUMNS]
    group_header = options.connection.group_id_header
    if extra and not options.headers_from_columns:
        names = ", ".join(f"'{f.name}'" for f in extra)
        raise InputError(
            f"input column {names} is not a clustermq writer column (allowed: "
            f"{', '.join(WRITE_COLUMNS)}); drop it, or set headersFromColumns=true to send "
            "it as a message header"
        )
    layout = InputLayout(
        body=body.name,
        body_is_text=isinstance(body.dataType, StringType),
        group_id=roles["group_id"],
        headers=roles["headers"],
        priority=roles["priority"],
        destination=roles["destination"],
        header_columns=tuple(f.name for f in extra),
        ttl=roles["ttl"],
        correlation_id=roles["correlation_id"],
        reply_to=roles["reply_to"],
        jms_type=roles["type"],
    )
    set_by_columns = layout.jms_headers()
    for f in extra:
        if f.name.lower() in set_by_columns:
            raise InputError(f"input column '{f.name}' cannot become a header: a JMS header column "
                             "of the input sets it")
        why = check_header_name(f.name, group_header)
        if why:
            raise InputError(f"input column '{f.name}' cannot become a header: the name {why}")
        if not isinstance(f.dataType, HEADER_VALUE_TYPES):
            raise InputError(
                f"input column '{f.name}' cannot become a header: type "
                f"{_type_name(f.dataType)} is not a string, number, boolean, date or timestamp"
            )
    return layout
