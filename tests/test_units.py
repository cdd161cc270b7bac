"""Fast unit tests of the pure logic: options, node addresses, offsets, hashing, AvailableNow."""

from __future__ import annotations

import dataclasses
import functools
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

import pytest

from clustermq.broker.connection_options import Secret
from clustermq.broker.dialect import ArtemisDialect, ClassicDialect, detect_dialect
from clustermq.broker.nodes import format_nodes, parse_nodes
from clustermq.groups import bucket_for_group, bucket_for_ungrouped, group_hash
from clustermq.options import OptionError, ReadOptions, WriteOptions
from clustermq.read import available_now
from clustermq.read.consumer import ClusterConsumer
from clustermq.read.copies import RecentIds, flag_repeats
from clustermq.read.links import LinkOwner
from clustermq.read.messages import BufferedMessage
from clustermq.read.offsets import allocate, make_offsets, parse_offsets
from clustermq.read.schema import to_record_batch
from clustermq.read.stalls import STALL_AFTER_S, STALL_RECHECK_S, StallWatch

BROKERS = "127.0.0.1:61613,127.0.0.1:61623,127.0.0.1:61633"


def read_opts(**extra: str) -> ReadOptions:
    raw = {"brokers": BROKERS, "queue": "orders"}
    raw.update(extra)
    return ReadOptions.parse({k.lower(): v for k, v in raw.items()})


# ----------------------------------------------------------------------------- nodes
def test_nodes_parse_and_format_round_trip() -> None:
    nodes = parse_nodes(BROKERS + ",stomp+ssl://mq.example:61614,[::1]:61700")
    assert [n.name for n in nodes][:3] == ["127.0.0.1:61613", "127.0.0.1:61623", "127.0.0.1:61633"]
    assert nodes[3].ssl and nodes[3].host == "mq.example"
    assert nodes[4].host == "::1"
    assert parse_nodes(format_nodes(nodes[:4])) == nodes[:4]


def test_a_failover_group_is_one_node_named_stably() -> None:
    text = "127.0.0.1:61613, masterslave:(127.0.0.1:61623,stomp+ssl://mq.example:61614),127.0.0.1:61633"
    nodes = parse_nodes(text)
    assert [n.name for n in nodes] == [
        "127.0.0.1:61613", "masterslave:(127.0.0.1:61623,ssl://mq.example:61614)", "127.0.0.1:61633"]
    group = nodes[1]
    assert [m.name for m in group.endpoints()] == ["127.0.0.1:61623", "ssl://mq.example:61614"]
    assert group.ssl and (group.host, group.port) == ("127.0.0.1", 61623)
    assert parse_nodes(format_nodes(nodes)) == nodes
    assert parse_nodes(text.replace(" ", "")) == nodes  # same text, same offset key


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "required"),
        ("localhost", "no port"),
        ("localhost:abc", "not a number"),
        ("localhost:70000", "outside"),
        ("tcp://localhost:61616", "unknown scheme 'tcp'"),
        ("a:1,a:1", "listed twice"),
    ],
)
def test_bad_broker_addresses_name_the_option(text: str, fragment: str) -> None:
    with pytest.raises(OptionError) as err:
        read_opts(brokers=text)
    assert "brokers" in str(err.value) and fragment in str(err.value)


# ----------------------------------------------------------------------------- options
def test_defaults() -> None:
    opts = read_opts()
    assert opts.num_partitions == 3
    assert opts.max_messages_per_trigger is None
    assert opts.prefetch_per_node == 10000
    assert opts.ack_mode == "client"
    assert opts.connection.flavor == "auto"
    rc = opts.connection.reconnect
    assert (rc.initial_delay_s, rc.max_delay_s, rc.exponential, rc.multiplier) == (1.0, 30.0, True, 2.0)


def test_prefetch_follows_max_messages() -> None:
    assert read_opts(maxMessagesPerTrigger="3000").prefetch_per_node == 6000
    assert read_opts(maxMessagesPerTrigger="3000", prefetchPerNode="100").prefetch_per_node == 100


def test_unknown_option_lists_known_ones() -> None:
    with pytest.raises(OptionError) as err:
        read_opts(maxMessagesPerTriger="5")
    message = str(err.value)
    assert "maxmessagespertriger" in message.lower()
    assert "maxMessagesPerTrigger" in message and "brokers" in message


@pytest.mark.parametrize(
    "name, value, fragment",
    [
        ("maxMessagesPerTrigger", "0", "below the minimum 1"),
        ("maxMessagesPerTrigger", "ten", "not an integer"),
        ("numPartitions", "-1", "below the minimum"),
        ("flavor", "rabbit", "allowed: auto, classic, artemis"),
        ("ackMode", "auto", "allowed: client, client-individual"),
        ("useExponentialBackOff", "maybe", "not a boolean"),
        ("backOffMultiplier", "0.5", "below the minimum"),
        ("queue", "/queue/x", "bare queue name"),
        ("queue", "a b", "may not contain"),
        ("initialReconnectDelay", "50000", "must not exceed"),
        ("discovery", "dns", "allowed: none, cluster"),
        ("selector", "  ", "is blank"),
        ("selector", "a = '\x00'", "NUL"),
    ],
)
def test_bad_values_name_the_option(name: str, value: str, fragment: str) -> None:
    with pytest.raises(OptionError) as err:
        read_opts(**{name: value})
    assert name in str(err.value) and fragment in str(err.value)


def test_a_selector_is_kept_for_reading_and_refused_for_writing() -> None:
    assert read_opts(selector=" region = 'EU' ").selector == "region = 'EU'"
    assert read_opts().selector is None
    with pytest.raises(OptionError, match="unknown option 'selector' for the clustermq writer"):
        WriteOptions.parse({"brokers": BROKERS, "queue": "q", "selector": "a = 1"})


def test_a_reader_takes_a_list_of_queues_and_the_writer_one() -> None:
    assert read_opts(queue=" orders , payments ").connection.queues == ("orders", "payments")
    assert read_opts().connection.queue == "orders"
    for text, fragment in (("orders,,payments", "has an empty entry"), ("orders,", "has an empty entry"),
                           ("orders,payments,orders", "'orders' named more than once"),
                           ("orders,pay>", "contains '>'")):
        with pytest.raises(OptionError, match="option 'queue'") as err:
            read_opts(queue=text)
        assert fragment in str(err.value), str(err.value)
    with pytest.raises(OptionError, match=r"the writer publishes to one queue, got 2 \(a,b\)"):
        WriteOptions.parse({"brokers": BROKERS, "queue": "a,b"})


def test_a_reader_takes_queue_patterns_where_the_broker_has_them_and_the_writer_none() -> None:
    assert read_opts(queue="orders.>,orders.*.eu,pay").connection.queues == ("orders.>", "orders.*.eu", "pay")
    assert read_opts(queue="orders.>", flavor="classic").connection.queue == "orders.>"
    for text, fragment in (
        (">", "starts with a wildcard"), ("*.eu", "starts with a wildcard"),
        ("orders.>.eu", "'>' before the last segment"), ("orders.e*", "contains '*'"),
        ("orders..>", "empty segment"), ("ActiveMQ.>", "keeps for itself (ActiveMQ.*"),
        ("clustermq.*.x", "keeps for itself (clustermq.staging.*"), ("orders.#", "contains '#'"),
    ):
        with pytest.raises(OptionError, match="option 'queue'") as err:
            read_opts(queue=text)
        assert fragment in str(err.value), (text, str(err.value))
    assert read_opts(queue="clustermq.eu.>").connection.queue == "clustermq.eu.>"
    with pytest.raises(OptionError, match=r"ActiveMQ Artemis cannot read the queue pattern 'orders\.>': .*copy"):
        read_opts(queue="orders.>", flavor="artemis")
    with pytest.raises(OptionError, match=r"option 'transport': 'amqp' reads named queues"):
        read_opts(queue="orders.>", transport="amqp", amqpBrokers="h1:5672,h2:5672")
    with pytest.raises(OptionError, match=r"the writer publishes to one queue, not to a pattern \('orders\.>'\)"):
        WriteOptions.parse({"brokers": BROKERS, "queue": "orders.>"})


def test_a_topic_read_is_durable_unless_asked_and_refuses_what_it_does_not_do() -> None:
    """A topic replaces the queue; without a subscription name only allowNonDurable reads it;
    what a topic read does not support fails at parse time, naming the option."""
    topic = {"brokers": BROKERS, "topic": "prices.eu"}
    durable = ReadOptions.parse({**topic, "subscriptionName": "to-delta"}).connection
    assert (durable.queues, durable.topic.name, durable.topic.client_id) == (
        ("prices.eu",), "to-delta", "clustermq.prices.eu.to-delta")
    assert ReadOptions.parse({**topic, "allowNonDurable": "true"}).connection.topic.client_id is None
    assert ClassicDialect().topic_subscription(durable.topic) == (
        "/topic/prices.eu", {"activemq.subscriptionName": "to-delta"})
    assert ArtemisDialect().topic_subscription(durable.topic)[1]["durable-subscription-name"] == "to-delta"
    for extra, fragment in (
        ({}, "option 'subscriptionName': is required with 'topic'"),
        ({"allowNonDurable": "false"}, "option 'subscriptionName': is required with 'topic'"),
        ({"queue": "q", "subscriptionName": "s"}, "option 'topic': and 'queue' are both set"),
        ({"subscriptionName": "a b"}, "option 'subscriptionName': 'a b' is not a subscription name"),
        ({"subscriptionName": "s", "transport": "amqp", "amqpBrokers": "h1:5672,h2:5672"},
         "option 'transport': is not supported with 'topic'"),
        ({"subscriptionName": "s", "discovery": "cluster"}, "option 'discovery': is not supported with 'topic'"),
        ({"subscriptionName": "s", "priorityNodes": "h1:61613"}, "option 'priorityNodes': is not supported"),
        ({"subscriptionName": "s", "selector": "a = 1"}, "option 'selector': is not supported with 'topic'"),
    ):
        with pytest.raises(OptionError) as err:
            ReadOptions.parse({**topic, **extra})
        assert fragment in str(err.value), (extra, str(err.value))
    with pytest.raises(OptionError, match="option 'topic': 'prices.>' contains '>'"):
        ReadOptions.parse({"brokers": BROKERS, "topic": "prices.>", "subscriptionName": "s"})
    with pytest.raises(OptionError, match="option 'subscriptionName': applies to a topic"):
        ReadOptions.parse({"brokers": BROKERS, "queue": "q", "subscriptionName": "s"})
    from clustermq.read.browse import check_browse_mode

    with pytest.raises(OptionError, match="option 'topic': a batch read browses a queue's backlog"):
        check_browse_mode(ReadOptions.parse({**topic, "subscriptionName": "s"}))
    with pytest.raises(OptionError, match="unknown option 'subscriptionName' for the clustermq writer"):
        WriteOptions.parse({"brokers": BROKERS, "topic": "t", "subscriptionName": "s"})


def test_the_lag_probe_asks_no_node_for_a_subscription_depth_it_cannot_tell() -> None:
    """Classic tells no subscription depth over STOMP, so a Classic topic read's lag report
    asks no node (a login per node every 10 s for nothing); Artemis tells a durable one's and
    is asked. The nodes listen nowhere: a node asked shows up in the answer with its error."""
    from types import SimpleNamespace

    from clustermq.devtools.localcluster.ports import free_ports
    from clustermq.read.consumer import ClusterConsumer
    from clustermq.read.stream import ClusterMQStreamReader

    brokers = ",".join(f"127.0.0.1:{port}" for port in free_ports(2))
    options = ReadOptions.parse({"brokers": brokers, "topic": "prices.eu", "subscriptionName": "s",
                                 "connectTimeout": "2000"})
    topic = options.connection.topic
    assert not ClassicDialect().tells_subscription_depth(topic)
    assert ArtemisDialect().tells_subscription_depth(topic)
    assert not ArtemisDialect().tells_subscription_depth(dataclasses.replace(topic, name=None))
    for dialect, asked in ((ClassicDialect(), 0), (ArtemisDialect(), 2)):
        reader = ClusterMQStreamReader(options)
        consumer = SimpleNamespace(
            options=options, subscriptions=[SimpleNamespace(node=n, dialect=dialect) for n in options.connection.nodes])
        consumer.depth_untold = functools.partial(ClusterConsumer.depth_untold, consumer)
        reader._consumer = consumer  # type: ignore[assignment]
        depths = reader._backlog_probe()()
        assert (len(depths), len(depths.errors)) == (asked, asked), (dialect.name, depths, depths.errors)


def test_a_topic_write_publishes_to_the_topic_and_stages_without_the_brokers_move() -> None:
    """The writer takes ``topic`` without a subscription; its SENDs (direct, or the move out of
    staging) go to the topic's destination with the flavor's routing; an atomic write stages and
    moves over STOMP, chosen without asking a broker; a ``destination``
    column, which routes rows to queues, is refused naming the column."""
    from pyspark.sql.types import StringType, StructField, StructType

    from clustermq.errors import InputError
    from clustermq.write.layout import input_layout
    from clustermq.write.modes import Direct, JobStaging, choose_mode

    options = WriteOptions.parse({"brokers": BROKERS, "topic": "prices.eu"})
    assert (options.connection.queues, options.connection.topic.client_id) == (("prices.eu",), None)
    assert options.connection.described == "topic 'prices.eu'"
    assert isinstance(choose_mode(options, unreachable_fails=True), JobStaging)
    assert isinstance(choose_mode(WriteOptions.parse({"brokers": BROKERS, "topic": "t", "writeMode": "direct"})),
                      Direct)
    assert ClassicDialect().target("prices.eu", topic=True) == ("/topic/prices.eu", {})
    assert ClassicDialect().target("prices.eu", topic=False) == ("/queue/prices.eu", {})
    assert ArtemisDialect().target("prices.eu", topic=True) == ("prices.eu", {"destination-type": "MULTICAST"})
    assert ArtemisDialect().target("prices.eu", topic=False) == ("prices.eu", {"destination-type": "ANYCAST"})
    schema = StructType([StructField("body", StringType()), StructField("destination", StringType())])
    with pytest.raises(InputError, match="input column 'destination' routes rows to queues, but option 'topic'"):
        input_layout(schema, options)
    with pytest.raises(OptionError, match="option 'topic': and 'queue' are both set"):
        WriteOptions.parse({"brokers": BROKERS, "topic": "t", "queue": "q"})


def test_missing_queue() -> None:
    with pytest.raises(OptionError, match="'queue' is required"):
        ReadOptions.parse({"brokers": BROKERS})


def test_password_never_shows() -> None:
    opts = read_opts(username="app", password="s3cr3t-pw")
    for text in (repr(opts), str(opts), repr(opts.connection), repr(opts.connection.password)):
        assert "s3cr3t-pw" not in text
    assert opts.connection.login == ("app", "s3cr3t-pw")
    assert "s3cr3t-pw" in pickle.loads(pickle.dumps(opts)).connection.login
    assert str(Secret("x")) == "Secret('***')"


def test_password_without_user_is_rejected() -> None:
    with pytest.raises(OptionError, match="'password' is set but 'username' is not"):
        read_opts(password="x")


def test_backoff_delays() -> None:
    delays = read_opts(initialReconnectDelay="100", maxReconnectDelay="500").connection.reconnect.delays()
    assert [delays() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    flat = read_opts(useExponentialBackOff="false").connection.reconnect.delays()
    assert [flat() for _ in range(3)] == [1.0, 1.0, 1.0]


# ----------------------------------------------------------------------------- offsets
def test_offsets_have_a_fixed_key_order() -> None:
    a = make_offsets({"b:2": 5, "a:1": 3}, ["b:2", "a:1", "c:3"])
    assert list(a) == ["a:1", "b:2", "c:3"] and a["c:3"] == 0
    assert parse_offsets({"c:3": 1, "a:1": 2, "gone:9": 7}, ["a:1", "c:3"]) == {"a:1": 2, "c:3": 1}
    with pytest.raises(ValueError, match="corrupt"):
        parse_offsets({"a:1": -1}, ["a:1"])


def test_allocate_is_fair_and_respects_limits() -> None:
    avail = [[10] * 100, [10] * 5, [10] * 100]
    assert allocate(avail, None, None) == [100, 5, 100]
    assert allocate(avail, 30, None) == [13, 5, 12]  # node 1 runs dry, the others share
    assert allocate(avail, None, 95) == [3, 3, 3]
    # one message bigger than the byte limit still moves the stream
    assert allocate([[1000]], None, 10) == [1]
    assert allocate([[], []], 5, 5) == [0, 0]


# ----------------------------------------------------------------------------- hashing
def test_group_hash_is_stable_across_processes() -> None:
    here = [bucket_for_group(f"customer-{i}", 7) for i in range(50)]
    code = (
        "from clustermq.groups import bucket_for_group;"
        "print([bucket_for_group(f'customer-{i}', 7) for i in range(50)])"
    )
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert str(here) == there.stdout.strip()
    assert group_hash("abc") == 0x352441C2  # CRC-32 of b"abc": fixed forever


def test_groups_spread_over_buckets() -> None:
    counts = [0] * 3
    for i in range(300):
        counts[bucket_for_group(f"g{i}", 3)] += 1
    assert min(counts) > 60
    assert sorted(bucket_for_ungrouped(s, 0, 3) for s in range(3)) == [0, 1, 2]


# ----------------------------------------------------------------------------- dialects
def test_dialects() -> None:
    assert isinstance(detect_dialect("ActiveMQ/5.18.3"), ClassicDialect)
    assert isinstance(detect_dialect("ActiveMQ-Artemis/2.40.0 ActiveMQ Artemis Messaging Engine"), ArtemisDialect)
    with pytest.raises(ValueError, match="flavor"):
        detect_dialect("RabbitMQ/3.12")
    classic, artemis = ClassicDialect(), ArtemisDialect()
    assert classic.destination("q") == "/queue/q"
    assert not classic.drops_duplicates and classic.duplicate_id_headers("j:0:1:2") == {}
    assert artemis.subscribe_headers(10, 2048)["consumer-window-size"] == "2048"
    assert classic.group_id({"clustermq_group": "g1"}, "clustermq_group") == "g1"
    assert artemis.group_id({"_AMQ_GROUP_ID": "g2", "clustermq_group": "x"}, "clustermq_group") == "g2"
    sent = classic.send_headers("g3", "clustermq_group")
    assert sent["JMSXGroupID"] == sent["clustermq_group"] == "g3"


@pytest.mark.parametrize(
    ("level", "shown"),
    [("INFO", ["info line", "warning line"]), ("warning", ["warning line"]),
     ("", []), ("LOUD", [])],
)
def test_log_level_from_the_environment_reaches_a_fresh_process(level: str, shown: list[str]) -> None:
    """A process Spark starts applies ``CLUSTERMQ_LOG_LEVEL`` once; unset or unknown leaves
    logging alone (no handler, nothing but Python's last-resort warnings)."""
    code = (
        "import logging; from clustermq.logs import apply_log_level\n"
        "apply_log_level(); apply_log_level()\n"
        "log = logging.getLogger('clustermq.consumer')\n"
        "log.info('info line'); log.warning('warning line')\n"
        "print(len(logging.getLogger('clustermq').handlers))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CLUSTERMQ_LOG_LEVEL"}
    if level:
        env["CLUSTERMQ_LOG_LEVEL"] = level
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    handlers = int(done.stdout.strip())
    assert handlers == (1 if shown else 0)
    lines = [line for line in done.stderr.splitlines() if "line" in line]
    if shown:
        assert [line.rsplit(": ", 1)[1] for line in lines] == shown
        assert all(" clustermq.consumer: " in line for line in lines)
    else:  # the last-resort handler prints warnings bare
        assert lines == ["warning line"]


class _Link:
    """A link that moves nothing over a wire: the test delivers and loses it through the owner's
    seam (read/links.py), as a link's own thread does."""

    dialect = ClassicDialect()

    def __init__(self, owner: LinkOwner, generation: int) -> None:
        self.owner, self.generation = owner, generation
        self.acked: list[str | None] = []
        self.closed_failed: list[str | None] | None = None  # what close() was told had failed

    def deliver(self, *message_ids: str) -> None:
        for mid in message_ids:
            self.owner.deliver({"message-id": mid, "destination": "/queue/q"}, b"x",
                               f"ack-{mid}-{self.generation}", self.generation)

    def lose(self) -> None:
        self.owner.link_lost(self.generation, "test")

    def ack(self, messages: list[BufferedMessage]) -> None:
        self.acked += [m.ack_id for m in messages]

    def close(self, failed: Sequence[BufferedMessage] = ()) -> None:
        self.closed_failed = [m.ack_id for m in failed]


class _Links:
    """Opens a :class:`_Link` per connection attempt; ``last`` is the newest."""

    def __init__(self) -> None:
        self.opened: list[_Link] = []

    def __call__(self, owner: LinkOwner, generation: int) -> _Link:
        self.opened.append(_Link(owner, generation))
        return self.opened[-1]

    @property
    def last(self) -> _Link:
        return self.opened[-1]


class _Clock:
    """``time.monotonic`` (the clock subscriptions stamp arrivals with), jumped ahead at will:
    the seconds a drain waits pass at once."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def now(self) -> float:
        return time.monotonic() + self.ahead

    def sleep(self, seconds: float) -> None:
        self.ahead += seconds


def connected_consumer(**extra: str) -> tuple[ClusterConsumer, _Links, str]:
    """A consumer of one node, connected over a :class:`_Link`, and its node's name."""
    links = _Links()
    consumer = ClusterConsumer(ReadOptions.parse({"brokers": "127.0.0.1:1", "queue": "q", **extra}),
                               open_link=links)
    consumer.subscriptions[0].connect_once()
    return consumer, links, consumer.node_names[0]


def test_available_now_does_not_count_a_second_delivery_of_a_message() -> None:
    """A copy (same message id) raises AvailableNow's target by one, so the last real message
    is still read; a message given back on a lost connection is not a copy when it returns."""
    consumer, links, name = connected_consumer()
    consumer.prepare_available_now(5)  # the depth measured at start: a, b, c, d, e
    consumer.set_start({name: 0})
    links.last.deliver("a", "b", "a", "c")  # "a" delivered twice
    assert consumer.latest({name: 0}, None, None) == {name: 4}
    assert consumer.available_now_pending({name: 4})  # 4 deliveries, but d and e are to come

    links.last.deliver("d", "e")
    links.last.lose()  # d and e were not planned: given back
    consumer.subscriptions[0].connect_once()
    links.last.deliver("d", "e")  # redelivered: not copies
    assert consumer.latest({name: 4}, None, None) == {name: 6}
    assert not consumer.available_now_pending({name: 6})  # every message of the backlog read


def test_a_second_delivery_of_a_message_is_emitted_flagged_redelivered_in_a_streaming_run() -> None:
    """A Classic bridge's copy carries the original's message id and no redelivered flag: the
    reader flags it, so a sink that checks flagged rows against what it wrote drops it; the
    first delivery, and a message given back before Spark planned it, stay unflagged."""
    consumer, links, name = connected_consumer()
    consumer.set_start({name: 0})
    links.last.deliver("a", "b")
    first = consumer.latest({name: 0}, None, None)
    links.last.deliver("c")
    links.last.lose()  # c was not planned: given back
    consumer.subscriptions[0].connect_once()
    links.last.deliver("c", "a")  # c redelivered after its give-back; a copy of a
    end = consumer.latest(first, None, None)
    rows = [to_record_batch(name, messages, ClassicDialect(), "JMSXGroupID")[0].to_pylist()
            for _, messages in consumer.take({name: 0}, end)][0]
    assert [(r["message_id"], r["redelivered"]) for r in rows] == [
        ("a", False), ("b", False), ("c", False), ("a", True)]


def test_a_stopped_subscription_closes_with_what_spark_was_handed_and_not_acknowledged_as_failed() -> None:
    """At stop, the link is told which deliveries Spark was handed and no commit acknowledged
    (AMQP settles them as failed deliveries, so the broker counts them): not the acknowledged
    ones, not those still buffered and never planned."""
    consumer, links, name = connected_consumer()
    consumer.set_start({name: 0})
    links.last.deliver("a", "b")
    links.last.lose()  # a and b were not planned: given back
    consumer.subscriptions[0].connect_once()
    links.last.deliver("a", "b", "c", "d")
    first = consumer.latest({name: 0}, 2, None)  # a, b planned and committed
    consumer.take({name: 0}, first)
    consumer.acknowledge(first)
    second = consumer.latest(first, 1, None)  # c planned, not acknowledged; d only buffered
    consumer.take(first, second)
    consumer.stop()
    generation = links.last.generation  # a lost connection's generation is skipped
    assert links.last.acked == [f"ack-a-{generation}", f"ack-b-{generation}"]
    assert links.last.closed_failed == [f"ack-c-{generation}"]


_RUNNER_STAND_IN = """
import importlib.machinery, os, signal, sys
from clustermq.read import worker_exit
if sys.argv[1] == "runner":
    sys.modules["__main__"].__spec__ = importlib.machinery.ModuleSpec(worker_exit.SOURCE_RUNNER, None)
installed = worker_exit.stop_in_order_on_sigterm()
try:
    print(installed, flush=True)  # inside the try: the parent signals once it reads this
    sys.stdin.read()  # as the runner waits for Spark's next request
finally:
    os.kill(os.getpid(), signal.SIGTERM)  # a later SIGTERM, during the stop
    print("stopped", flush=True)
"""


@pytest.mark.parametrize("role", ["runner", "other"])
def test_sigterm_unwinds_the_source_worker_through_its_stop_and_leaves_other_processes_alone(role: str) -> None:
    """Spark ends a stream's Python worker with SIGTERM (and may again as its worker factory
    stops); in that worker the reader makes it unwind through the runner's ``finally`` (the
    reader's stop, which closes its connections in order) and ignores a later one; any other process keeps Python's default, which ends it
    at once."""
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER_STAND_IN, role], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        installed = proc.stdout.readline().strip()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    if role == "runner":
        assert (installed, out, proc.returncode) == ("True", "stopped\n", 128 + signal.SIGTERM), err
    else:
        assert (installed, out, proc.returncode) == ("False", "", -signal.SIGTERM), err


def test_a_batch_holds_at_most_one_unflagged_row_per_message_id() -> None:
    """Spark plans a batch in the reader's process, so a repeat within it is flagged whatever the
    window of remembered ids (two nodes delivering one message, a window too small to hold it)."""
    consumer, links, name = connected_consumer()
    consumer.subscriptions[0]._recent = RecentIds(capacity=1)
    consumer.set_start({name: 0})
    links.last.deliver("a", "b", "a", "c", "a")  # the window forgets a before each repeat
    end = consumer.latest({name: 0}, None, None)
    taken = [(m.headers["message-id"], m.copy) for _, messages in consumer.take({name: 0}, end)
             for m in messages]
    assert taken == [("a", False), ("b", False), ("a", True), ("c", False), ("a", True)]
    unkeyed = [BufferedMessage({}, b"", None, 0, arrival) for arrival in range(4)]
    assert flag_repeats([("x", unkeyed[0]), ("x", unkeyed[1]), (None, unkeyed[2]), (None, unkeyed[3])]) == 1
    assert [m.copy for m in unkeyed] == [False, True, False, False]  # no id: nothing to compare


def test_a_quiet_query_reopens_other_nodes_then_the_holder_while_a_node_holds_messages() -> None:
    """A query that plans nothing for ``STALL_AFTER_S`` while a node holds messages it does not
    deliver re-opens the other nodes' settled subscriptions (their bridge consumers on the holder
    may own the groups), then at the next check the holder's too; a subscription with an
    unacknowledged delivery is left alone, and a planned batch ends the quiet."""
    links = _Links()
    consumer = ClusterConsumer(ReadOptions.parse({"brokers": "127.0.0.1:1,127.0.0.1:2", "queue": "q"}),
                               open_link=links)
    holder, other = consumer.subscriptions
    for sub in consumer.subscriptions:
        sub.connect_once()
    clock = _Clock()
    depths = {holder.node.name: 3, other.node.name: 0}
    probes: list[dict[str, int]] = []
    watch = StallWatch(lambda: probes.append(dict(depths)) or dict(depths), lambda: consumer.subscriptions,
                       clock=clock.now, spawn=lambda work: work())
    watch.planned(False)  # the quiet starts
    clock.sleep(STALL_AFTER_S - 1)
    watch.planned(False)
    assert probes == [] and holder.connected and other.connected
    clock.sleep(1.5)
    watch.planned(False)
    assert len(probes) == 1 and holder.connected and not other.connected  # the other node first
    watch.planned(False)
    assert len(probes) == 1  # not again before the recheck
    other.connect_once()
    clock.sleep(STALL_RECHECK_S)
    watch.planned(False)
    assert len(probes) == 2 and not holder.connected and not other.connected  # then the holder too

    for sub in consumer.subscriptions:
        sub.connect_once()
    watch.planned(True)  # a batch: the quiet ends, the next check is STALL_AFTER_S away
    watch.planned(False)
    clock.sleep(STALL_AFTER_S - 1)
    watch.planned(False)
    assert len(probes) == 2
    consumer.set_start({holder.node.name: 0, other.node.name: 0})
    links.last.deliver("m")  # the other node's subscription holds a delivery
    clock.sleep(1.5)
    watch.planned(False)
    assert len(probes) == 3 and holder.connected and other.connected  # unacknowledged: left alone

    depths.update({holder.node.name: 0, other.node.name: 1})  # what it holds is this query's own
    assert watch.check(holders_too=True) == []
    assert holder.connected and other.connected

    selective = ClusterConsumer(ReadOptions.parse({"brokers": "127.0.0.1:1", "queue": "q",
                                                   "selector": "kind = 'a'"}))
    selective.watch_stalls(lambda: {"unused": 1})
    assert selective._stalls is None  # the depth counts what the selector leaves out


def test_available_now_recounts_once_before_it_ends() -> None:
    """Once the backlog measured at start is read, a recount that settles on messages still
    queued (the start probe missed them) extends the run once; a recount that finds only ACKs
    the broker had not processed yet (depth falling to 0) ends it."""
    consumer, links, name = connected_consumer()
    clock = _Clock()
    probes = iter([{name: 2}, {name: 1}, {name: 1}, {name: 1}, {name: 5}])
    # the start probe saw a and b
    consumer.prepare_available_now(2, lambda: next(probes), clock=clock.now, sleep=clock.sleep)
    consumer.set_start({name: 0})
    links.last.deliver("a", "b", "c")  # c is delivered but beyond the target
    assert consumer.latest({name: 0}, None, None) == {name: 2}
    consumer.acknowledge({name: 2})
    # depth 2 (b's ACK not processed yet), then 1, 1, 1: settled on c, which this query holds
    assert consumer.available_now_pending({name: 2})
    assert clock.ahead == 3 * available_now.RECOUNT_INTERVAL_S  # probes spaced, not at once
    assert consumer.latest({name: 2}, None, None) == {name: 3}
    consumer.acknowledge({name: 3})
    assert not consumer.available_now_pending({name: 3})  # recounted already: the run ends
    assert next(probes) == {name: 5}  # and it did not probe again
    assert links.last.acked == ["ack-a-1", "ack-b-1", "ack-c-1"]  # each once, after its batch

    ended = ClusterConsumer(ReadOptions.parse({"brokers": "127.0.0.1:1", "queue": "q"}))
    probes = iter([{name: 3}, {name: 0}])  # ACKs still landing, then empty
    ended.prepare_available_now(0, lambda: next(probes), clock=clock.now, sleep=clock.sleep)
    assert not ended.available_now_pending({name: 0})
    assert next(probes, "done") == "done"


def test_available_now_ends_early_only_on_a_queue_found_empty_twice() -> None:
    """Waiting for a backlog that competing consumers took ends once two probes find the queue
    empty, without resubscribing anywhere (nothing is held back); messages still counted on a
    node (a stalled bridge holds them) keep it waiting, and get their nodes resubscribed."""
    check_s = available_now.EMPTY_CHECK_INTERVAL_S

    def waiting(depth: int | None) -> tuple[ClusterConsumer, list[int], _Clock, _Links]:
        consumer, links, name = connected_consumer(availableNowIdleTimeout="60000")
        clock = _Clock()
        probes: list[int] = []
        consumer.prepare_available_now(5, lambda: probes.append(1) or {name: depth},
                                       clock=clock.now, sleep=clock.sleep)
        consumer.set_start({name: 0})
        links.last.deliver("a")
        assert consumer.latest({name: 0}, None, None) == {name: 1}
        consumer.acknowledge({name: 1})
        assert consumer.latest({name: 1}, None, None) == {name: 1}  # quiet from here
        assert consumer.available_now_pending({name: 1}) and probes == []  # not asked at once
        clock.sleep(available_now.EMPTY_CHECK_AFTER_S + 0.5)  # past the quiet before the first probe
        return consumer, probes, clock, links

    emptied, probes, clock, links = waiting(0)
    name = emptied.node_names[0]
    assert emptied.available_now_pending({name: 1})  # empty once: not yet
    assert emptied.available_now_pending({name: 1}) and len(probes) == 1  # not asked again at once
    clock.sleep(check_s)  # now past the quiet after which it suspects a stall (3 s at most)
    assert not emptied.available_now_pending({name: 1})  # twice: ends
    assert len(probes) == 2 and emptied.available_now_target == 1
    assert emptied.subscriptions[0].connected and len(links.opened) == 1, (
        "an emptied queue was resubscribed: every node reconnected for nothing")
    links.last.deliver("b")
    assert emptied.latest({name: 1}, None, None) == {name: 1}  # nothing beyond the end is planned

    stalled, probes, clock, links = waiting(3)  # 3 messages counted on the node, none arriving
    assert stalled.available_now_pending({name: 1}) and stalled.subscriptions[0].connected
    clock.sleep(check_s)
    assert stalled.available_now_pending({name: 1})
    assert not stalled.subscriptions[0].connected  # past 3 s of quiet: resubscribed
    for _ in range(5):
        assert stalled.available_now_pending({name: 1})
        clock.sleep(check_s)
    assert len(probes) >= 5 * available_now.RECOUNT_AGREEING  # it kept asking, and waiting

    silent, probes, clock, _ = waiting(None)  # the node does not answer, but the query is connected to it
    for _ in range(3):
        if not silent.subscriptions[0].connected:
            silent.subscriptions[0].connect_once()  # (re)connected after the resubscribe
        assert silent.available_now_pending({name: 1})
        clock.sleep(check_s)
    gone, probes, clock, links = waiting(None)  # neither the probe nor the query reaches it: nothing to wait for
    links.last.lose()
    assert gone.available_now_pending({name: 1})
    clock.sleep(check_s)
    assert not gone.available_now_pending({name: 1})


def test_recent_ids_are_bounded_and_forget_what_was_given_back() -> None:
    recent = RecentIds(capacity=3)
    assert [recent.seen_before(k) for k in ["a", "b", "a", "c", "d", "e"]] == [
        False, False, True, False, False, False]
    assert len(recent) == 3 and not recent.seen_before("b")  # "b" was evicted
    recent.forget(["b", None])
    assert not recent.seen_before("b")


# ----------------------------------------------------------------------------- priority backup
def test_priority_nodes_are_a_validated_subset_and_lead_the_failover_order() -> None:
    from clustermq.write.load_balancing import failover_order

    brokers = BROKERS + ",masterslave:(127.0.0.1:61643,127.0.0.1:61653)"
    parse = lambda **extra: WriteOptions.parse({"brokers": brokers, "queue": "q", **extra})  # noqa: E731
    assert parse().priority == ()
    assert parse(prioritynodes="masterslave:(127.0.0.1:61643,127.0.0.1:61653),127.0.0.1:61613").priority == (0, 3)
    for bad, fragment in [("127.0.0.1:9", "not in 'brokers'"), (" ", "is empty"), ("x", "no port")]:
        with pytest.raises(OptionError) as err:
            parse(prioritynodes=bad)
        assert "priorityNodes" in str(err.value) and fragment in str(err.value), str(err.value)
    assert failover_order(1, 4, (0, 3)) == [3, 0, 1, 2]
    assert failover_order(3, 4, (0, 3)) == [3, 0, 1, 2]
    assert failover_order(1, 4) == [1, 2, 3, 0]


def test_the_reader_takes_priority_nodes_and_marks_the_others_as_paused_backups() -> None:
    """The reader parses ``priorityNodes`` like the writer; nodes outside it become backups that
    start paused and offer nothing to plan, and the lag report shows them paused."""
    from clustermq.options import ReadOptions
    from clustermq.read.lag import lag_report
    from clustermq.read.priority import BackupSubscription, subscription_class

    parse = lambda **extra: ReadOptions.parse({"brokers": BROKERS, "queue": "q", **extra})  # noqa: E731
    assert parse().priority_nodes == ()
    options = parse(priorityNodes="127.0.0.1:61623,127.0.0.1:61613")
    assert options.priority_nodes == ("127.0.0.1:61613", "127.0.0.1:61623")
    with pytest.raises(OptionError, match="priorityNodes"):
        parse(priorityNodes="127.0.0.1:9")
    nodes = options.connection.nodes
    assert [subscription_class(options, n) is BackupSubscription for n in nodes] == [False, False, True]
    assert all(subscription_class(parse(), n) is not BackupSubscription for n in nodes)
    backup = BackupSubscription(nodes[2], 2, options, iter(range(10**6)), lambda n: None)
    backup.set_base(0)
    assert backup.paused and backup.available(0) == []
    assert lag_report([backup.status()], {})[nodes[2].name] == {
        "offset": 0, "buffered": 0, "acknowledged": 0, "paused": 1, "disconnected": 1}


def test_a_local_clusters_password_is_one_the_brokers_jms_clients_can_pass() -> None:
    """The brokers' CLI clients take a ``--password`` value starting with '-' for an option and
    log in without one; letters and digits only can never start so."""
    from clustermq.devtools.localcluster.startup import PASSWORD_LENGTH, new_password

    passwords = {new_password() for _ in range(2000)}
    assert len(passwords) == 2000
    odd = sorted(p for p in passwords if not (p.isascii() and p.isalnum() and len(p) == PASSWORD_LENGTH))
    assert not odd, odd[:5]


def test_a_log_offset_taken_before_a_start_reads_only_what_the_node_writes_after_it(tmp_path) -> None:
    from clustermq.devtools.localcluster.clusterdir import ClusterDir

    directory = ClusterDir(tmp_path)
    assert directory.log_size(0) == 0  # never started: no log yet
    directory.node_dir(0).mkdir()
    directory.log_path(0).write_text("first run\n")
    mark = directory.log_size(0)
    with open(directory.log_path(0), "a") as log:
        log.write("second run\n")
    assert directory.log_since(0, mark) == "second run\n"
