"""The ``selector`` option against JMS-produced messages: only what it matches is read, the rest
stays queued, and a selector the broker refuses fails the query before anything is consumed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from test_jms_interop import produce_groups, producer_of
from test_reader import assert_each_delivery_emitted_once, drain, new_queue
from waits import cluster_state

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

#: how a JMS producer's group is selected: Artemis's STOMP filter knows the group only by its
#: own name (a selector on JMSXGroupID matched none of 50 grouped messages, measured on 2.40)
GROUP_PROPERTY = {"classic": "JMSXGroupID", "artemis": "_AMQ_GROUP_ID"}
#: a quiet time after the last matching message that ends an AvailableNow run with a selector
IDLE_MS = 4000


def group_selector(broker: Any, group: str) -> str:
    return f"{GROUP_PROPERTY[broker.flavor]} = '{group}'"


def read_selected(spark: SparkSession, broker: Any, queue: str, work: Path, group: str,
                  **extra: object) -> list[Any]:
    """AvailableNow with a selector for ``group``: the rows, each delivery emitted once."""
    rows, _ = drain(spark, broker.reader_options(queue, selector=group_selector(broker, group),
                                                 availableNowIdleTimeout=IDLE_MS,
                                                 maxMessagesPerTrigger=150, **extra), work)
    assert_each_delivery_emitted_once(rows)
    return rows.select("message_id", "headers").collect()


def test_a_selector_reads_only_the_matching_jms_messages_and_leaves_the_rest(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    """Two JMS producers (group red: 300 on node 0; blue: 200 on node 1). A query selecting red
    reads exactly red's 300 and nothing of blue, which stays queued (200 over the nodes); on
    Classic a browse selecting blue shows those 200; a second query selecting blue, over AMQP
    (the receiver's selector filter), then reads exactly those 200 and empties the queue."""
    queue = new_queue("selector")
    produce_groups(broker, tmp_path, queue, {"red": (0, 300, 0), "blue": (1, 200, 0)})
    red = read_selected(spark, broker, queue, tmp_path / "red", "red")
    producers = {producer_of(r["message_id"], r["headers"]) for r in red}
    distinct = {r["message_id"] for r in red}
    left = broker.settled_depths(queue)
    assert (len(red), len(distinct), len(producers), sum(d or 0 for d in left.values())) == (300, 300, 1, 200), (
        f"red read {len(red)} rows ({len(distinct)} distinct) from {len(producers)} producers; "
        f"depths after: {left}\n{cluster_state(broker, queue)}")
    if broker.flavor == "classic":
        browsed = (spark.read.format("clustermq")
                   .options(**broker.reader_options(queue, selector=group_selector(broker, "blue")))
                   .load().select("message_id", "headers").collect())
        assert sorted(r["message_id"] for r in browsed) == sorted(
            r["message_id"] for r in browsed if producer_of(r["message_id"], r["headers"]) not in producers)
        assert len({r["message_id"] for r in browsed}) == len(browsed) == 200, len(browsed)
    blue = read_selected(spark, broker, queue, tmp_path / "blue", "blue", transport="amqp",
                         amqpBrokers=broker.cluster.amqp_brokers)
    blue_producers = {producer_of(r["message_id"], r["headers"]) for r in blue}
    assert (len(blue), len({r["message_id"] for r in blue}), len(blue_producers)) == (200, 200, 1), (
        f"blue read {len(blue)} rows from {len(blue_producers)} producers\n{cluster_state(broker, queue)}")
    assert not blue_producers & producers
    assert broker.wait_depth_zero(queue) == {n.name: 0 for n in broker.cluster.nodes()}


def test_a_selector_the_broker_refuses_fails_the_query_before_anything_is_consumed(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    queue = new_queue("badselector")
    broker.produce(queue, 20)
    options = broker.reader_options(queue, selector="amount > > 1")
    query = (spark.readStream.format("clustermq").options(**options).load().writeStream
             .format("noop").option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    with pytest.raises(StreamingQueryException) as failed:
        query.awaitTermination(120)
    message = str(failed.value)
    assert "option 'selector'" in message and "refused 'amount > > 1'" in message, message
    assert options["password"] not in message
    assert sum(d or 0 for d in broker.settled_depths(queue).values()) == 20
    if broker.flavor == "classic":  # the batch read (browse) checks it too
        with pytest.raises(Exception, match=r"option 'selector'.*refused") as browse:
            spark.read.format("clustermq").options(**options).load().count()
        assert options["password"] not in str(browse.value)
    rows, _ = drain(spark, broker.reader_options(queue), tmp_path / "all")
    assert (rows.count(), rows.filter("redelivered").count()) == (20, 0)
