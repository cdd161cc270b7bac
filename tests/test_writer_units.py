"""Fast unit tests of the writer's pure logic: options, input columns, node choice, messages."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from clustermq.broker.dialect import ClassicDialect
from clustermq.errors import InputError
from clustermq.groups import bucket_for_group
from clustermq.options import OptionError, WriteOptions
from clustermq.write.headers import staging_queue
from clustermq.write.layout import input_layout
from clustermq.write.load_balancing import failover_order, group_node, job_key, task_node
from clustermq.write.message_builder import MessageBuilder
from clustermq.write.modes import WriteMode
from clustermq.write.staging import final_headers

_TYPES = {"string": StringType(), "binary": BinaryType(), "int": IntegerType(), "long": LongType(),
          "map<string,string>": MapType(StringType(), StringType()),
          "map<string,int>": MapType(StringType(), IntegerType())}


def schema(ddl: str) -> StructType:
    """A tiny DDL parser (StructType.fromDDL needs a running SparkSession)."""
    fields = []
    for part in ddl.split(", "):
        name, type_name = part.split(" ", 1)
        fields.append(StructField(name, _TYPES[type_name]))
    return StructType(fields)


BROKERS = "127.0.0.1:61613,127.0.0.1:61623,127.0.0.1:61633"


def write_opts(**extra: str) -> WriteOptions:
    raw = {"brokers": BROKERS, "queue": "orders", "username": "app", "password": "s3cret-pw"}
    raw.update(extra)
    return WriteOptions.parse({k.lower(): v for k, v in raw.items()})


def test_write_options_defaults_and_validation() -> None:
    o = write_opts()
    assert (o.load_balancing_policy, o.persistent, o.headers_from_columns) == ("roundRobin", True, False)
    assert o.receipt_timeout_s == 60.0
    assert "s3cret-pw" not in repr(o)
    with pytest.raises(OptionError, match="loadBalancingPolicy.*roundRobin"):
        write_opts(loadBalancingPolicy="sticky")
    with pytest.raises(OptionError, match="(?i)unknown option 'maxMessagesPerTrigger' for the clustermq writer"):
        write_opts(maxMessagesPerTrigger="10")
    # writeStream hands its checkpointLocation to the sink like an option
    assert write_opts(checkpointLocation="/tmp/cp").connection.queue == "orders"


def test_input_columns_are_checked_by_name() -> None:
    o = write_opts()
    layout = input_layout(schema("Body string, group_id long, headers map<string,string>"), o)
    assert (layout.body, layout.body_is_text, layout.group_id) == ("Body", True, "group_id")
    with pytest.raises(InputError, match="needs a 'body' column"):
        input_layout(schema("value binary"), o)
    with pytest.raises(InputError, match="'body' must be binary or string, not int"):
        input_layout(schema("body int"), o)
    with pytest.raises(InputError, match="'extra' is not a clustermq writer column.*headersFromColumns"):
        input_layout(schema("body binary, extra string"), o)
    with pytest.raises(InputError, match="'headers' must be map<string,string>"):
        input_layout(schema("body binary, headers map<string,int>"), o)
    with_headers = write_opts(headersFromColumns="true")
    assert input_layout(schema("body binary, n int"), with_headers).header_columns == ("n",)
    with pytest.raises(InputError, match="'clustermq_x' cannot become a header"):
        input_layout(schema("body binary, clustermq_x string"), with_headers)


def test_policies_and_failover_order() -> None:
    key = job_key("job-1", 0)
    starts = {task_node("roundRobin", 3, key, p) for p in range(6)}
    assert starts == {0, 1, 2}  # six tasks cover every node
    assert [task_node("roundRobin", 3, key, p) for p in range(3)] == \
        [(task_node("roundRobin", 3, key, 0) + p) % 3 for p in range(3)]
    sticky = {task_node("randomSticky", 3, job_key("job-1", b), p) for b in range(4) for p in range(5)}
    assert len(sticky) == 1  # one node per job, whatever the batch and task
    assert {task_node("firstElement", 3, key, p) for p in range(5)} == {0}
    assert all(0 <= task_node("random", 3, key, p) < 3 for p in range(20))
    assert failover_order(2, 3) == [2, 0, 1]
    assert all(group_node(f"g{i}", 3) == bucket_for_group(f"g{i}", 3) for i in range(50))


def test_messages_carry_ids_groups_and_name_bad_rows() -> None:
    o = write_opts()
    layout = input_layout(schema("body string, group_id string, priority int"), o)
    builder = MessageBuilder(layout, o, "job-1", 4, 7, "tag", default_node=1)
    batch = pa.RecordBatch.from_pydict(
        {"body": ["a", "b"], "group_id": ["g1", None], "priority": [5, None]},
        schema=pa.schema([("body", pa.string()), ("group_id", pa.string()), ("priority", pa.int32())]),
    )
    first, second = list(builder.messages(batch))
    assert first.headers["clustermq_id"] == "job-1:4:7:0" and second.headers["clustermq_id"] == "job-1:4:7:1"
    assert first.preferred == bucket_for_group("g1", 3) and second.preferred == 1
    assert first.headers["clustermq_group"] == "g1" and first.headers["priority"] == "5"
    assert first.body == b"a" and first.headers["persistent"] == "true"
    bad = pa.RecordBatch.from_pydict(
        {"body": [None], "group_id": ["g"], "priority": [1]}, schema=batch.schema
    )
    with pytest.raises(InputError, match="row 2 of partition 7 has a null body"):
        list(builder.messages(bad))
    out_of_range = pa.RecordBatch.from_pydict(
        {"body": ["x"], "group_id": [None], "priority": [11]}, schema=batch.schema
    )
    with pytest.raises(InputError, match="priority 11 is outside 0-9"):
        list(builder.messages(out_of_range))


def test_jms_header_columns_set_the_jms_headers_and_name_bad_rows() -> None:
    o = write_opts()
    layout = input_layout(schema("body string, ttl long, correlation_id string, reply_to string, type string, "
                                 "headers map<string,string>"), o)
    builder = MessageBuilder(layout, o, "job-1", 0, 2, "tag", default_node=0)
    fields = [("body", pa.string()), ("ttl", pa.int64()), ("correlation_id", pa.string()),
              ("reply_to", pa.string()), ("type", pa.string()),
              ("headers", pa.map_(pa.string(), pa.string()))]

    def rows(**columns: list[object]) -> pa.RecordBatch:
        base: dict[str, list[object]] = {"body": ["a"], "ttl": [None], "correlation_id": [None],
                                         "reply_to": [None], "type": [None], "headers": [None]}
        return pa.RecordBatch.from_pydict({**base, **columns}, schema=pa.schema(fields))

    before = int(time.time() * 1000)
    full, bare, no_expiry = list(builder.messages(pa.concat_batches([
        rows(ttl=[60_000], correlation_id=["c-1"], reply_to=["replies"], type=["invoice"]), rows(), rows(ttl=[0])])))
    assert before + 60_000 <= int(full.headers["expires"]) <= int(time.time() * 1000) + 60_000
    assert (full.headers["correlation-id"], full.headers["type"], full.reply_to) == ("c-1", "invoice", "replies")
    assert not {"expires", "correlation-id", "type"} & (set(bare.headers) | set(no_expiry.headers))
    assert bare.reply_to is None
    with pytest.raises(InputError, match="row 3 of partition 2: ttl -5 is negative"):
        list(builder.messages(rows(ttl=[-5])))
    with pytest.raises(InputError, match="reply_to '/queue/r' is not a queue name: give the bare queue name"):
        list(builder.messages(rows(reply_to=["/queue/r"])))
    with pytest.raises(InputError, match="header 'Correlation-Id' is set by a column of the input"):
        list(builder.messages(rows(headers=[[("Correlation-Id", "x")]])))
    with pytest.raises(InputError, match="'ttl' must be an integer type"):
        input_layout(schema("body string, ttl string"), o)
    with pytest.raises(InputError, match="'type' must be string, not int"):
        input_layout(schema("body string, type int"), o)
    with pytest.raises(InputError, match="'reply-to' cannot become a header: a JMS header column"):
        input_layout(schema("body string, reply_to string, reply-to string"), write_opts(headersFromColumns="true"))


def test_staged_headers_become_final_headers() -> None:
    o = write_opts()
    staged = {
        "message-id": "ID:x", "destination": "/queue/s", "subscription": "1", "ack": "a",
        "content-length": "3", "redelivered": "false", "timestamp": "1", "expires": "0",
        "clustermq_task": "t", "clustermq_target": "orders", "clustermq_id": "j:0:0:0",
        "clustermq_group": "g1", "k": "v",
    }
    final = final_headers(staged, ClassicDialect(), o)
    assert final["JMSXGroupID"] == "g1" and final["clustermq_group"] == "g1"
    assert final["k"] == "v" and final["persistent"] == "true" and final["clustermq_id"] == "j:0:0:0"
    assert not {"message-id", "ack", "subscription", "clustermq_task", "clustermq_target", "expires"} & set(final)
    assert staging_queue("orders", "j", 2) == "clustermq.staging.orders.j.n2"


def test_classic_names_a_header_value_outside_the_bmp_and_artemis_accepts_it() -> None:
    from clustermq.broker.dialect import ArtemisDialect

    fine = {"a": "plain", "b": "é ü 中 \uffff", "c": ""}
    assert ClassicDialect().header_value_problem(fine) is None
    problem = ClassicDialect().header_value_problem({**fine, "x-astral": "ok \U0001D11E"})
    assert problem is not None
    assert problem.startswith("header 'x-astral' has a character outside the Basic "
                              "Multilingual Plane (U+1D11E)")
    assert ArtemisDialect().header_value_problem({"x": "\U0001F600"}) is None


def test_each_write_mode_sends_where_its_commit_looks() -> None:
    """Job staging: the job's queue per node, staging headers kept. Attempt staging: the
    attempt's own queue, final headers (duplicate id, no task header, the target only for a
    row not for ``queue``). Direct: the row's own queue with the final headers."""
    from clustermq.broker.dialect import ArtemisDialect
    from clustermq.write.modes import AttemptStaging, Direct, JobStaging, TaskRoute

    def frame(mode: WriteMode, target: str) -> tuple[str, dict[str, str]]:
        headers = {"clustermq_id": "j:0:0:5", "clustermq_task": "tag", "clustermq_target": target, "k": "v"}
        return TaskRoute(mode, "orders", "j", "tag").frame(2, ArtemisDialect(), headers)

    destination, staged = frame(JobStaging(), "orders")
    assert destination == "clustermq.staging.orders.j.n2" and staged["clustermq_task"] == "tag"
    assert "_AMQ_DUPL_ID" not in staged and staged["clustermq_target"] == "orders"
    for target, kept in (("orders", None), ("audit", "audit")):
        destination, final = frame(AttemptStaging(), target)
        assert destination == "clustermq.staging.orders.j.tag.n2"
        assert final.get("clustermq_target") == kept and "clustermq_task" not in final
        assert final["_AMQ_DUPL_ID"] == "j:0:0:5" and final["k"] == "v"
    destination, final = frame(Direct(), "audit")
    assert destination == "audit" and final["_AMQ_DUPL_ID"] == "j:0:0:5"
    assert not {"clustermq_task", "clustermq_target"} & set(final)


def test_a_write_mode_is_a_plain_value_chosen_on_the_driver() -> None:
    """Modes pickle to the tasks and back in their commit messages; ``writeMode=direct`` asks
    no broker; a streaming commit finishes the way the batch's tasks published."""
    import pickle

    from clustermq.broker.nodes import Node
    from clustermq.errors import MoveError
    from clustermq.write.modes import AttemptStaging, Direct, JobStaging, choose_mode
    from clustermq.write.spark import batch_mode
    from clustermq.write.task import ClusterMQCommitMessage

    for mode in (Direct(), JobStaging(), AttemptStaging()):
        assert pickle.loads(pickle.dumps(mode)) == mode
    assert choose_mode(write_opts(writeMode="direct")) == Direct()  # no node is listening

    def task(mode: WriteMode) -> ClusterMQCommitMessage:
        return ClusterMQCommitMessage(job_id="q", batch_id=1, partition=0, attempt=0, task_tag="t",
                                      rows=1, counts={0: 1}, unavailable={}, seconds=0.1,
                                      nodes=(Node("mq1", 61613),), mode=mode)

    assert batch_mode(JobStaging(), [task(AttemptStaging()), task(AttemptStaging())]) == AttemptStaging()
    assert batch_mode(Direct(), []) == Direct()  # no task reported: the writer's own
    with pytest.raises(MoveError, match="different write modes"):
        batch_mode(JobStaging(), [task(AttemptStaging()), task(JobStaging())])
