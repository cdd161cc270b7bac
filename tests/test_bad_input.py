"""Bad input against live clusters and a real local Spark: a clear error, and nothing lost.

Every case ends with exact counts on the brokers (queue depth per node) or in
the sink, so "nothing lost" and "nothing half-published" are checked, not assumed. Cases the
older suites already cover (malformed broker addresses, bad option values, the reader's wrong
password, bad rows in the writer) are not repeated here; see the report in docs/reliability.md.

Broker facts these tests rest on (measured on Classic 5.18.3 and Artemis 2.40.0 over STOMP 1.2):

* Neither broker refuses odd queue names with an ERROR; they route them elsewhere. Classic reads
  ``a,b`` as a composite destination (one SEND lands in two queues) and ``a?b`` as queue ``a``
  with destination options ``b``; ``*``/``>`` (Classic) and ``*``/``#`` (Artemis) make a
  SUBSCRIBE a wildcard subscription (Artemis ``#`` delivered ``activemq.notifications``). What
  the brokers do refuse: Classic a header line over 10,240 bytes ("The maximum header length
  was exceeded"), so a name of about 10 kB; Artemis an empty name (``AMQ229216 Invalid queue
  name``); Classic closes the connection on an empty name without an ERROR.
* Classic's STOMP transport refuses a frame over ``transport.maxFrameSize`` (64 MiB in the
  local cluster's templates, ``clustermq/devtools/localcluster/templates/classic``) as soon as it reads the
  ``content-length`` header: ERROR "The maximum frame size was exceeded", then it closes the
  connection. Artemis's ``stompMaxFramePayloadLength``
  applies to STOMP over WebSockets only: over TCP it accepted 64 MiB + 4 KiB and delivered it
  to a consumer whose window was 64 KiB; 160 MiB failed after 68 s with ERROR
  "java.lang.reflect.InvocationTargetException" (512 MiB heap).
* stomp.py 9.0 escapes header values (STOMP 1.2: ``\\``, ``\n``, ``\r``, ``:``) but not header
  names: a name with a backslash reaches the broker raw; Artemis refuses the frame
  ("AMQ339040 Undefined escape sequence \\s"), Classic takes it. The writer refuses such names.
"""

from __future__ import annotations

import dataclasses
import json
import random
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from clustermq.broker.dialect import resolve_dialect
from clustermq.broker.queue_names import MAX_QUEUE_NAME_BYTES
from clustermq.broker.stomp_connection import close_connection, open_connection
from clustermq.errors import NodeUnavailable
from clustermq.options import WriteOptions, parse_connection_options
from clustermq.write.layout import InputLayout
from clustermq.write.modes import JobStaging
from clustermq.write.publisher import MessageRefused
from clustermq.write.task import TaskIdentity, write_task
from test_reader import drain, new_queue
from waits import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[1]
#: transport.maxFrameSize of the local cluster's Classic templates
#: (clustermq.devtools.localcluster.classic_flavor.MAX_FRAME_SIZE)
CLASSIC_MAX_FRAME = 64 * 1024 * 1024


def write(df: DataFrame, broker: Any, queue: str, **options: object) -> None:
    (df.write.format("clustermq").mode("append")
     .options(**broker.reader_options(queue, **options)).save())


def zero(broker: Any) -> dict[str, int]:
    return {n.name: 0 for n in broker.cluster.nodes()}


def plain_send(broker: Any, queue: str, messages: list[tuple[bytes, dict[str, str]]]) -> None:
    """Send with plain stomp.py on node 0, as a foreign producer would (persistent, receipt).

    The connector's own connection helper only logs in; frames are built here, so what the
    reader receives is whatever stomp.py's STOMP 1.2 encoding made of the bytes and headers.
    """
    import threading

    import stomp

    node = broker.cluster.nodes()[0]
    done = threading.Event()

    class Receipt(stomp.ConnectionListener):
        def on_receipt(self, frame: Any) -> None:
            done.set()

    conn, connected = open_connection(node, broker.connection(queue), listener=Receipt())
    try:
        dialect = resolve_dialect("auto", connected.get("server"))
        for i, (body, headers) in enumerate(messages):
            extra = {"receipt": "last"} if i == len(messages) - 1 else {}
            conn.send(dialect.destination(queue), body, headers={
                **headers, **dialect.routing_headers(), "persistent": "true", **extra})
        assert done.wait(30), "no RECEIPT for the last SEND"
    finally:
        close_connection(conn)


# ----------------------------------------------------------------------------- credentials
def test_writer_with_wrong_password_names_every_node_and_publishes_nothing(
    spark: SparkSession, broker: Any
) -> None:
    """The reader's case is test_reader::test_wrong_password_is_a_clear_error_without_the_password."""
    queue = new_queue("badpw")
    options = broker.reader_options(queue)
    options["password"] = "wrong-pw-never-shown"
    df = spark.range(0, 20, 1, 2).select(F.col("id").cast("string").alias("body"))
    with pytest.raises(Exception) as err:
        df.write.format("clustermq").mode("append").options(**options).save()
    text = str(err.value)
    assert "login failed" in text
    assert all(n.name in text for n in broker.cluster.nodes()), text[:2000]
    assert "wrong-pw-never-shown" not in text
    assert dict(broker.depths(queue)) == zero(broker)


def test_an_unreachable_cluster_names_each_node_and_why_login_and_tls(broker: Any) -> None:
    """The kinds only a live broker can show (tests/test_errors.py has refused, DNS and timeout
    with real sockets): a wrong password is ``[login]`` on every node, at the reader's start,
    the batch read and the write, and never shows the password; ``stomp+ssl://`` to a plain
    STOMP port is ``[TLS]`` (the broker does not answer the ClientHello as TLS)."""
    from clustermq.errors import LOGIN, TLS, NoNodeReachable
    from clustermq.options import ReadOptions
    from clustermq.read.browse import ClusterMQBatchReader
    from clustermq.read.consumer import ClusterConsumer
    from clustermq.write.spark import ClusterMQBatchWriter

    password = "wrong-pw-never-shown"
    given = {**broker.reader_options(new_queue("unreach")), "password": password, "connectTimeout": "5000"}
    options = {k.lower(): v for k, v in given.items()}  # as Spark hands them to the source
    names = [n.name for n in broker.cluster.nodes()]
    consumer = ClusterConsumer(ReadOptions.parse(options))
    try:
        with pytest.raises(NoNodeReachable) as start:
            consumer.start()
    finally:
        consumer.stop()
    with pytest.raises(NoNodeReachable) as browse:
        ClusterMQBatchReader(ReadOptions.parse(options)).partitions()
    with pytest.raises(NoNodeReachable) as write:
        ClusterMQBatchWriter(WriteOptions.parse(options), InputLayout(body="body", body_is_text=True))
    for err in (start.value, browse.value, write.value):
        text = str(err)
        assert all(f"broker node {name}: [login] login failed: " in text for name in names), text
        assert {f.kind for f in err.failures} == {LOGIN} and password not in text

    node = broker.cluster.nodes()[0]
    tls = parse_connection_options({**options, "password": broker.login["password"],
                                    "brokers": f"stomp+ssl://{node.name}", "connecttimeout": "3000"})
    with pytest.raises(NodeUnavailable) as err:
        open_connection(tls.nodes[0], tls)
    assert err.value.kind == TLS, err.value
    assert "stomp://" in str(err.value), err.value


# ----------------------------------------------------------------------------- queue names
def bad_queue_names(base: str) -> list[tuple[str, str]]:
    """(name, fragment of the error): each one a broker would take for another queue (a ','
    list is several queues to a reader, a Classic wildcard a pattern: below, for the writer)."""
    return [
        (f"{base}?consumer.prefetchSize=1", "'?'"),  # Classic: options; reads/writes `base`
        (f"{base}.#", "'#'"),                  # Artemis: multi-word wildcard
        (f"{base}.e*", "'*'"),                 # a wildcard inside a segment
        ("q" * (MAX_QUEUE_NAME_BYTES + 1), f"at most {MAX_QUEUE_NAME_BYTES}"),
    ]


def test_queue_names_the_brokers_would_misroute_are_refused_before_anything_moves(
    spark: SparkSession, broker: Any
) -> None:
    """Reader and writer refuse each name at load()/save(), naming `queue` and what is
    allowed; the messages waiting on the queue the bad name would have reached stay there."""
    base = new_queue("qname")
    broker.produce(base, 12)
    for name, fragment in bad_queue_names(base):
        with pytest.raises(Exception) as err:
            spark.readStream.format("clustermq").options(**broker.reader_options(name)).load()
        text = str(err.value)
        assert "option 'queue'" in text and fragment in text, text[:500]
        with pytest.raises(Exception) as err:
            write(spark.createDataFrame([("x",)], "body string"), broker, name)
        assert "option 'queue'" in str(err.value) and fragment in str(err.value)
    # Classic would take a ',' list for a composite destination (one SEND into every queue)
    # and a wildcard for one more queue: the writer publishes to one queue, and its per-row
    # destination goes through the same name check as the option (one Spark job per bad name
    # would only cost time); a reader takes both (test_several_queues.py)
    listed = f"{base},{base}.copy"
    with pytest.raises(Exception) as err:
        write(spark.createDataFrame([("x",)], "body string"), broker, listed)
    assert "option 'queue': the writer publishes to one queue, got 2" in str(err.value), str(err.value)[:500]
    for pattern in (f"{base}.*", f"{base}.>"):
        with pytest.raises(Exception) as err:
            write(spark.createDataFrame([("x",)], "body string"), broker, pattern)
        assert f"one queue, not to a pattern ('{pattern}')" in str(err.value), str(err.value)[:500]
    rows = spark.createDataFrame([("x", base), ("y", listed)], "body string, destination string")
    with pytest.raises(Exception) as err:
        write(rows.coalesce(1), broker, base)
    assert "row 1 of partition 0: destination" in str(err.value) and "','" in str(err.value)
    assert sum(d or 0 for d in broker.depths(base).values()) == 12
    assert sum(d or 0 for d in broker.depths(f"{base}.copy").values()) == 0


@pytest.mark.flavors("classic")
def test_a_name_the_broker_refuses_is_reported_with_the_row_and_every_node(broker: Any) -> None:
    """What slips past validation to a broker ERROR is surfaced, not retried forever.

    Classic refuses a header line over 10,240 bytes. The writer's option check stops such a
    name first, so the task runs here with options built past that check (real brokers, no
    mock): every node answers the SEND with an ERROR, and the task fails naming the row and each
    node's ERROR, with nothing staged anywhere.
    """
    queue = new_queue("qlong")
    good = WriteOptions.parse(broker.reader_options(queue))
    refused = "r" * 11_000
    options = dataclasses.replace(good, connection=dataclasses.replace(good.connection, queues=(refused,)))
    batches = iter([pa.RecordBatch.from_arrays([pa.array([b"m0", b"m1"])], names=["body"])])
    with pytest.raises(MessageRefused) as err:
        write_task(options, InputLayout(body="body", body_is_text=False),
                   TaskIdentity(uuid.uuid4().hex, 0, 0, 0), batches, JobStaging())
    text = str(err.value)
    assert "row 0 of partition 0" in text and "was refused by the brokers" in text
    assert text.count("The maximum header length was exceeded") == len(broker.cluster.nodes())
    assert all(n.name in text for n in broker.cluster.nodes())
    assert dict(broker.depths(queue)) == zero(broker)


# ----------------------------------------------------------------------------- frame size
@pytest.mark.flavors("classic")
def test_a_body_over_the_max_frame_size_fails_naming_the_row_and_publishes_nothing(
    spark: SparkSession, broker: Any
) -> None:
    """Row 2 of a 4-row partition carries 64 MiB + 1 byte, one more than Classic's STOMP
    transport takes: the job fails naming that row and each node's ERROR; none of the rows,
    not even the ones sent before it, reaches the queue. (Artemis has no such limit over TCP:
    see the module doc.)"""
    queue = new_queue("qbig")
    size = CLASSIC_MAX_FRAME + 1
    df = spark.range(0, 4, 1, 1).select(
        # the length depends on a column so the optimizer cannot fold a 64 MiB literal into
        # the plan (measured: formatting that plan for the UI ran the driver out of heap)
        F.when(F.col("id") == 2, F.expr(f"repeat('x', cast(id + {size - 2} as int))"))
        .otherwise(F.concat(F.lit("small-"), F.col("id").cast("string")))
        .cast("binary").alias("body")
    )
    with pytest.raises(Exception) as err:
        write(df, broker, queue)
    text = str(err.value)
    assert "row 2 of partition 0 (clustermq_id " in text, text[-3000:]
    assert f"{size:,}-byte body was refused by the brokers" in text
    assert text.count("The maximum frame size was exceeded") == len(broker.cluster.nodes())
    assert dict(broker.depths(queue)) == zero(broker)


# ----------------------------------------------------------------------------- bodies
def odd_bodies() -> list[bytes]:
    """Bodies that are not UTF-8 text, or that only survive with a correct content-length."""
    rng = random.Random(7)
    return [
        b"\x00",
        b"\x00\x00middle\x00\x00",
        b"\xff",
        b"\xc3\x28",                      # invalid 2-byte sequence
        b"\xed\xa0\x80",                  # UTF-16 surrogate encoded as UTF-8 (invalid)
        b"\xf8\x88\x80\x80\x80",          # 5-byte form (invalid)
        b"\r\n\r\n",
        b"ends with NUL\x00",
        bytes(range(256)) * 4,
        rng.randbytes(65_536),
        # far bigger than the Artemis consumer window of 64 KiB that prefetchPerNode=40 gives
        rng.randbytes(3 * 1024 * 1024),
    ]


def test_non_utf8_bodies_round_trip_byte_for_byte(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    """Each body sent by the writer and by plain stomp.py comes back exactly once, unchanged,
    also one far larger than an Artemis consumer window; the queue ends empty."""
    queue = new_queue("qbytes")
    bodies = odd_bodies()
    df = spark.createDataFrame(
        [(bytearray(b), {"case": f"w{i}"}) for i, b in enumerate(bodies)],
        "body binary, headers map<string,string>",
    ).repartition(3)
    write(df, broker, queue)
    plain_send(broker, queue, [(b, {"case": f"s{i}"}) for i, b in enumerate(bodies)])

    # Artemis: window = 40 x 1.5 KiB, clamped up to 64 KiB (README, Flavors)
    rows, _ = drain(spark, broker.reader_options(queue, prefetchPerNode=40), tmp_path)
    got = {r["case"]: bytes(r["body"]) for r in
           rows.select(F.col("headers")["case"].alias("case"), "body").collect()}
    assert rows.count() == 2 * len(bodies)
    expected = {f"{p}{i}": b for i, b in enumerate(bodies) for p in ("w", "s")}
    assert sorted(got) == sorted(expected)
    wrong = [case for case in expected if got[case] != expected[case]]
    assert not wrong, f"bodies changed: {wrong}"
    assert broker.wait_depth_zero(queue) == zero(broker)


# ----------------------------------------------------------------------------- headers
ODD_HEADERS = {
    "colon": "a:b:c",
    "only-colon": ":",
    "newline": "line1\nline2",
    "carriage-return": "cr\rhere",
    "crlf": "a\r\nb",
    "backslash": "back\\slash",
    "escape-lookalikes": "\\n \\c \\r \\\\",
    "everything": "k:v\r\n\\:\\",
    "spaces": "  leading and trailing  ",
    # BMP here; outside it see test_header_values_outside_the_bmp_...
    "unicode": "é ü 中",
    "empty": "",
}


def test_header_values_with_colons_line_breaks_and_backslashes_round_trip(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    """STOMP 1.2 escaping, both ways and through the writer's move out of staging: every
    header comes back exactly, from the writer and from plain stomp.py."""
    queue = new_queue("qheaders")
    df = spark.createDataFrame([("w", {**ODD_HEADERS, "via": "writer"})],
                               "body string, headers map<string,string>")
    write(df, broker, queue)
    plain_send(broker, queue, [(b"s", {**ODD_HEADERS, "via": "stomp"})])

    rows, _ = drain(spark, broker.reader_options(queue), tmp_path)
    got = {r["headers"]["via"]: r["headers"] for r in rows.collect()}
    assert sorted(got) == ["stomp", "writer"] and rows.count() == 2
    for via, headers in got.items():
        changed = {k: (v, headers.get(k)) for k, v in ODD_HEADERS.items() if headers.get(k) != v}
        assert not changed, f"{via}: {changed}"
    assert broker.wait_depth_zero(queue) == zero(broker)

    # Header *names* are not escaped by stomp.py: one with a backslash would reach Artemis raw
    # and be refused mid-job, so the writer refuses it first, naming the row.
    bad = spark.createDataFrame([("a", {"ok": "1"}), ("b", {"back\\slash": "v"})],
                                "body string, headers map<string,string>").coalesce(1)
    with pytest.raises(Exception) as err:
        write(bad, broker, queue)
    assert "row 1 of partition 0: header 'back\\slash' is not a valid STOMP header name" in str(err.value)
    assert dict(broker.depths(queue)) == zero(broker)


ASTRAL = "emoji \U0001F600 clef \U0001D11E é"


def test_header_values_outside_the_bmp_round_trip_or_are_refused_naming_the_row(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    """Artemis carries them; a Classic network bridge replaces each with two U+FFFD, so the
    Classic writer refuses such a row by name and publishes nothing."""
    queue = new_queue("qastral")
    df = spark.createDataFrame([("a", {"plain": "1"}), ("b", {"x-astral": ASTRAL})],
                               "body string, headers map<string,string>").coalesce(1)
    if broker.flavor == "artemis":
        write(df, broker, queue)
        plain_send(broker, queue, [(b"s", {"x-astral": ASTRAL})])
        rows, _ = drain(spark, broker.reader_options(queue), tmp_path)
        values = sorted((r["body"], r["headers"].get("x-astral")) for r in rows.collect())
        assert values == [(b"a", None), (b"b", ASTRAL), (b"s", ASTRAL)], values
        assert broker.wait_depth_zero(queue) == zero(broker)
        return

    with pytest.raises(Exception) as err:
        write(df, broker, queue)
    assert ("row 1 of partition 0: header 'x-astral' has a character outside the Basic "
            "Multilingual Plane (U+1F600)") in str(err.value)
    assert dict(broker.depths(queue)) == zero(broker)
    # The broker fact behind the refusal: sent on node 0, read by a consumer on node 1 only
    # (so it crosses a bridge), the value changes; the body does not.
    plain_send(broker, queue, [(ASTRAL.encode(), {"x-astral": ASTRAL})])
    got: list[Any] = []
    query = (spark.readStream.format("clustermq")
             .options(**broker.reader_options(queue, brokers=broker.cluster.nodes()[1].name))
             .load().writeStream.foreachBatch(lambda batch, _: got.extend(batch.collect()))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(lambda: got or query.exception() is not None, 120, "the message on node 1")
        # acknowledged after its batch commits, while the query still runs
        depths = broker.wait_depth_zero(queue)
    finally:
        query.stop()
    assert len(got) == 1 and got[0]["body"] == ASTRAL.encode(), got
    assert got[0]["headers"]["x-astral"] == "emoji \ufffd\ufffd clef \ufffd\ufffd é", got[0]["headers"]
    assert depths == zero(broker)


# ----------------------------------------------------------------------------- poison
def queue_to_delta_job() -> Any:
    """The queue_to_delta job's module: the test runs the job's own flag parsing."""
    import clustermq.jobs.queue_to_delta as job

    return job


POISON = [
    b"not json at all",
    b"",
    b"null",
    b"[1, 2, 3]",
    b"42",
    b'{"order": "forty-two", "customer": "c-x"}',  # wrong type
    b'{"order": 7, "customer": "\xff\xfe"}',      # invalid UTF-8 inside a valid object
    b'{"order": 8, "customer": "trunc',          # truncated
]


def test_poison_messages_are_kept_in_corrupt_never_dropped(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    """queue_to_delta --parse json: good and poison messages in; one row per message out,
    poison rows with ``_corrupt`` set and parsed columns null, counted; the queue ends empty."""
    from clustermq.pipelines.delta_sink import BatchReport
    from clustermq.pipelines.delta_stream import start_queue_to_delta
    from clustermq.pipelines.job_config import reader_options
    from clustermq.pipelines.streaming import run_until_done

    queue, good = new_queue("qpoison"), 30
    messages = [(json.dumps({"order": i, "customer": f"c{i % 4}", "extra": [i]}).encode(),
                 {"case": f"good{i}"}) for i in range(good)]
    messages += [(body, {"case": f"poison{i}"}) for i, body in enumerate(POISON)]
    random.Random(3).shuffle(messages)
    plain_send(broker, queue, messages)

    table, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    job = queue_to_delta_job()
    args = job.parse_args([
        "--brokers", broker.cluster.brokers, "--queue", queue, "--table", str(table),
        "--checkpoint", str(checkpoint), "--trigger", "availableNow",
        "--max-messages-per-trigger", "20", "--parse", "json",
        "--schema", "order long, customer string",
    ])
    options = reader_options(args.brokers, args.source, args.max_messages_per_trigger,
                             {**args.reader_options, **broker.login})
    reports: list[BatchReport] = []
    query, sink = start_queue_to_delta(spark, options, args.table, args.checkpoint, args.trigger,
                                       args.dedupe, on_report=reports.append, parse=args.body_parse)
    run_until_done(query)

    rows = spark.read.format("delta").load(str(table)).collect()
    assert len(rows) == len(messages) == good + len(POISON)
    assert len({r["message_id"] for r in rows}) == len(messages)
    by_case = {r["headers"]["case"]: r for r in rows}
    for i in range(good):
        r = by_case[f"good{i}"]
        assert (r["order"], r["customer"], r["_corrupt"]) == (i, f"c{i % 4}", None)
    for i, body in enumerate(POISON):
        r = by_case[f"poison{i}"]
        assert r["order"] is None and r["customer"] is None, r
        assert r["_corrupt"] is not None and bytes(r["body"]) == body
    assert by_case["poison0"]["_corrupt"] == "not json at all"
    assert sink.totals.corrupt == len(POISON) and sink.totals.written == len(messages)
    assert sum(r.corrupt or 0 for r in reports) == len(POISON)
    assert all("unparsable (kept with their body in _corrupt)" in r.line() for r in reports)
    assert broker.wait_depth_zero(queue) == zero(broker)


def test_with_a_park_queue_what_the_table_refuses_is_parked_and_the_rest_written(
    spark: SparkSession, broker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """queue_to_delta --parse json --park-queue (the job's own flags and run, in this process's
    Spark session) into a table created beforehand with a CHECK constraint and a NOT NULL
    column. Without the park queue Delta would refuse every batch holding one of the bad
    messages, on every run. With it: the table holds exactly the good messages; the park queue
    exactly the others, each with its body byte for byte, its producer's header, and the rule it
    broke; the queue read ends empty."""
    from clustermq.read.schema import READ_SCHEMA_DDL

    username, password = broker.cluster.credentials
    monkeypatch.setenv("CLUSTERMQ_USERNAME", username)  # the jobs' only source of credentials
    monkeypatch.setenv("CLUSTERMQ_PASSWORD", password)
    queue, park = new_queue("qpark"), new_queue("qparked")
    table = tmp_path / "table"
    spark.sql(f"CREATE TABLE delta.`{table}` ({READ_SCHEMA_DDL}, ingest_time timestamp, "
              "batch_id long, amount long, customer string NOT NULL, _corrupt string) USING delta")
    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT positive_amount CHECK (amount > 0)")
    bad = {f"negative{i}": (json.dumps({"amount": -i, "customer": "c"}).encode(),
                            "CHECK constraint positive_amount: amount > 0") for i in range(4)}
    bad |= {f"nameless{i}": (json.dumps({"amount": 100 + i}).encode(),
                             "NOT NULL column customer is null") for i in range(3)}
    bad |= {f"poison{i}": (body, "the body does not parse")
            for i, body in enumerate([b"not json at all", b"[1, 2, 3]", b"42"])}
    good = {f"good{i}": json.dumps({"amount": i + 1, "customer": f"c{i % 4}"}).encode() for i in range(30)}
    messages = [(body, {"case": case}) for case, (body, _) in bad.items()]
    messages += [(body, {"case": case}) for case, body in good.items()]
    random.Random(5).shuffle(messages)
    plain_send(broker, queue, messages)

    job = queue_to_delta_job()
    args = job.parse_args([
        "--brokers", broker.cluster.brokers, "--queue", queue, "--table", str(table),
        "--checkpoint", str(tmp_path / "checkpoint"), "--trigger", "availableNow",
        "--max-messages-per-trigger", "20", "--parse", "json",
        "--schema", "amount long, customer string", "--park-queue", park])
    assert password not in repr(args.park)
    assert job.run(spark, args) == 0
    printed = capsys.readouterr().out

    rows = spark.read.format("delta").load(str(table)).collect()
    written = {r["headers"]["case"]: r for r in rows}
    assert sorted(written) == sorted(good) and len(rows) == len(good), sorted(written)
    assert all(r["amount"] > 0 and r["customer"] and r["_corrupt"] is None for r in rows)
    parked, _ = drain(spark, broker.reader_options(park), tmp_path / "park")
    found = {r["headers"]["case"]: r for r in parked.collect()}
    assert sorted(found) == sorted(bad) and parked.count() == len(bad), sorted(found)
    for case, (body, reason) in bad.items():
        r = found[case]
        assert bytes(r["body"]) == body and r["headers"]["park_reason"] == reason, (case, r)
        assert r["headers"]["park_origin"].endswith(queue) and r["headers"]["park_message_id"]
    assert f"{len(bad)} parked in {park}" in printed, printed
    assert f"{len(good)} rows written" in printed and "0 duplicates dropped" in printed, printed
    assert broker.wait_depth_zero(queue) == zero(broker)


@pytest.mark.parametrize(
    "brokers, fragment",
    [
        ("masterslave:({node})", "has one member"),
        ("masterslave:{node},{node}", "is not a failover group"),
        ("masterslave:({node},127.0.0.1:1", "unclosed '('"),
        ("masterslave:(({node},127.0.0.1:1))", "nested parentheses"),
        ("{node},masterslave:({node},127.0.0.1:1)", "listed twice"),
        ("masterslave:({node},tcp://127.0.0.1:1)", "unknown scheme 'tcp'"),
    ],
)
def test_a_bad_failover_group_in_brokers_names_the_option_and_the_grammar(
    spark: SparkSession, broker: Any, brokers: str, fragment: str
) -> None:
    """Reader and writer refuse a malformed ``masterslave:(...)`` group before anything moves."""
    queue = new_queue("badgroup")
    broker.produce(queue, 10)
    options = broker.reader_options(queue)
    options["brokers"] = brokers.format(node=broker.cluster.nodes()[0].name)
    with pytest.raises(Exception) as err:
        spark.readStream.format("clustermq").options(**options).load()
    text = str(err.value)
    assert "option 'brokers'" in text and fragment in text, text
    with pytest.raises(Exception) as err:
        spark.createDataFrame([("x",)], "body string").write.format("clustermq").mode("append") \
            .options(**options).save()
    text = str(err.value)
    assert "option 'brokers'" in text and fragment in text, text
    if fragment in ("has one member", "is not a failover group", "nested parentheses"):
        assert "masterslave:(host:port,host:port" in text, text
    assert sum(d or 0 for d in broker.depths(queue).values()) == 10  # nothing consumed or sent
