"""Security: STOMP over TLS, required logins, and passwords that never leak.

A TLS cluster of its own (2 nodes per flavor, ``LocalCluster.up(tls=True)``: a CA and a broker
certificate generated with keytool, STOMP only over TLS) with a distinctive password, so that a
leak anywhere is found by a plain substring search. Real brokers, real Spark, no mocks.
"""

from __future__ import annotations

import io
import json
import logging
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from clustermq.broker.depth import queue_depths
from clustermq.broker.nodes import Node
from clustermq.broker.redaction import redact
from clustermq.broker.stomp_connection import NodeUnavailable, close_connection, open_connection
from clustermq.devtools.loadgen import LoadSpec, produce
from clustermq.devtools.localcluster.certificates import generate_ca, keystore_password
from clustermq.devtools.localcluster.cluster import LocalCluster
from clustermq.devtools.localcluster.stompprobe import stomp_connect
from clustermq.options import OptionError, ReadOptions, WriteOptions, parse_connection_options
from conftest import cluster_flavors

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.cluster,
    # sslVerifyHostname=false makes stomp.py build its context with ssl.PROTOCOL_TLS (see
    # connection.tls_parameters); Python flags the constant as deprecated.
    pytest.mark.filterwarnings("ignore:ssl.PROTOCOL_TLS is deprecated:DeprecationWarning"),
]

PASSWORD = "Sec-" + secrets.token_hex(6) + "-pw"  # distinctive: a substring search finds any leak


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module", params=cluster_flavors())
def tls_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 2-node cluster of the flavor whose STOMP ports speak only TLS; always stopped."""
    local = LocalCluster(tmp_path_factory.mktemp(f"tls-{request.param}"))
    try:
        local.up(nodes=2, flavor=request.param, password=PASSWORD, tls=True)
        yield local
    finally:
        local.down()


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A second CA that signed nothing the brokers present."""
    return str(generate_ca(tmp_path_factory.mktemp("other-ca"), "other-ca-pass", name="some other CA"))


def options(cluster: LocalCluster, queue: str, **extra: str) -> dict[str, str]:
    username, password = cluster.credentials
    opts = {"brokers": cluster.brokers, "queue": queue, "username": username, "password": password,
            "sslCaFile": str(cluster.ca_file)}
    opts.update(extra)
    return opts


def lowered(opts: dict[str, str]) -> dict[str, str]:
    """What Spark hands a source: lower-cased option names."""
    return {k.lower(): v for k, v in opts.items()}


def new_queue(tag: str) -> str:
    return f"test.sec.{tag}.{uuid.uuid4().hex[:8]}"


def wait_depth_zero(cluster: LocalCluster, queue: str, timeout: float = 30.0) -> dict[str, int | None]:
    """Acknowledgements are asynchronous: poll the (TLS) depth probe until every node says 0."""
    username, password = cluster.credentials
    deadline = time.monotonic() + timeout
    while True:
        depths = queue_depths(cluster.nodes(), queue, username, password)
        if all(d == 0 for d in depths.values()) or time.monotonic() > deadline:
            return dict(depths)
        time.sleep(0.2)


class CapturedLogs:
    """DEBUG records of the connector's and stomp.py's loggers, as formatted text."""

    NAMES = ("clustermq", "stomp.py")

    def __init__(self) -> None:
        self.buffer = io.StringIO()
        self.handler = logging.StreamHandler(self.buffer)
        self.handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.levels: dict[str, int] = {}

    def __enter__(self) -> CapturedLogs:
        for name in self.NAMES:
            logger = logging.getLogger(name)
            self.levels[name] = logger.level
            logger.setLevel(logging.DEBUG)
            logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.NAMES:
            logger = logging.getLogger(name)
            logger.removeHandler(self.handler)
            logger.setLevel(self.levels[name])

    @property
    def text(self) -> str:
        return self.buffer.getvalue()


# ----------------------------------------------------------------------------- no cluster
def test_stomp_py_would_log_the_passcode_and_our_filter_redacts_it() -> None:
    """stomp.py 9's own scrubber misses ``passcode:<pw>`` (it wants a space after the colon)."""
    from stomp.utils import Frame, clean_lines, convert_frame

    line = clean_lines(convert_frame(Frame("CONNECT", {"login": "u", "passcode": "plain-pw-1"}, None)))
    assert "passcode:plain-pw-1" in line  # the fact the filter exists for
    for password in ("plain-pw-1", "it's-a pw", "back\\slash", 'q"uote'):
        frame = clean_lines(convert_frame(Frame("CONNECT", {"login": "u", "passcode": password}, None)))
        assert password not in redact(frame) and "passcode:***" in redact(frame)
    # The filter sits on stomp.py's logger, so every handler sees the redacted record.
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    stomp_log = logging.getLogger("stomp.py")
    level = stomp_log.level
    stomp_log.addHandler(handler)
    stomp_log.setLevel(logging.DEBUG)
    try:
        stomp_log.debug("sending frame: %s", line)
    finally:
        stomp_log.removeHandler(handler)
        stomp_log.setLevel(level)
    assert "plain-pw-1" not in buffer.getvalue() and "passcode:***" in buffer.getvalue()


def test_tls_options_are_checked_when_options_are_parsed(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate\n")
    ssl_brokers = "stomp+ssl://127.0.0.1:61614,stomp+ssl://127.0.0.1:61624"
    base = {"brokers": ssl_brokers, "queue": "q"}

    with pytest.raises(OptionError, match=r"option 'sslCaFile': file '.*missing\.pem' does not exist"):
        ReadOptions.parse({**base, "sslcafile": str(tmp_path / "missing.pem")})
    with pytest.raises(OptionError, match=r"option 'sslCertFile': file .* does not exist"):
        WriteOptions.parse({**base, "sslcertfile": str(tmp_path / "client.pem")})
    with pytest.raises(OptionError, match="option 'sslCaFile'.*no usable PEM certificate"):
        ReadOptions.parse({**base, "sslcafile": str(ca)})
    with pytest.raises(OptionError, match="'sslKeyFile' is set but 'sslCertFile' is not"):
        ReadOptions.parse({**base, "sslkeyfile": str(ca)})
    with pytest.raises(OptionError, match="sslVerifyHostname"):
        ReadOptions.parse({**base, "sslverifyhostname": "maybe"})
    # TLS options with no stomp+ssl:// node: an error (a silent plain-text connection is worse).
    with pytest.raises(OptionError, match="option 'sslVerifyHostname' is set but no node in 'brokers' uses TLS"):
        ReadOptions.parse({"brokers": "127.0.0.1:61613", "queue": "q", "sslverifyhostname": "false"})

    parsed = ReadOptions.parse({**base, "sslverifyhostname": "false"}).connection
    assert all(n.ssl and n.tls is not None and not n.tls.verify_hostname for n in parsed.nodes)
    assert parsed.nodes[0].name == "ssl://127.0.0.1:61614"  # the offset key ignores TLS settings
    plain = ReadOptions.parse({"brokers": "127.0.0.1:61613", "queue": "q"}).connection
    assert plain.tls is None and plain.nodes[0].tls is None


# ----------------------------------------------------------------------------- TLS cluster
def test_cluster_records_ca_and_prints_tls_brokers_without_keystore_password(tls_cluster: LocalCluster) -> None:
    assert tls_cluster.tls and Path(tls_cluster.ca_file or "").is_file()
    assert all(b.startswith("stomp+ssl://127.0.0.1:") for b in tls_cluster.brokers.split(","))
    done = subprocess.run(
        [sys.executable, "-m", "clustermq.devtools.cli", "cluster", "status", "--dir", str(tls_cluster.dir)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"CA certificate (option sslCaFile): {tls_cluster.ca_file}" in done.stdout
    assert tls_cluster.brokers in done.stdout
    state = tls_cluster.state()
    secrets_ = (keystore_password(state.password), state.password)
    logs = "".join(tls_cluster.log_path(n.index).read_text(errors="replace") for n in state.nodes)
    for secret in secrets_:
        assert secret not in done.stdout + done.stderr
        assert secret not in logs


def test_cluster_refuses_anonymous_default_and_plain_text_logins(tls_cluster: LocalCluster) -> None:
    node = tls_cluster.nodes()[0]
    for username, password in ((None, None), ("admin", "admin"), ("clustermq", "admin")):
        # a refused login is an ERROR frame; the time limit only bounds a loaded machine's answer
        raw = {"brokers": tls_cluster.brokers, "queue": "q", "sslcafile": str(tls_cluster.ca_file),
               "connecttimeout": "20000"}
        if username:
            raw.update(username=username, password=password)
        with pytest.raises(NodeUnavailable) as err:
            open_connection(node, parse_connection_options(raw))
        assert "login failed" in str(err.value) and node.name in str(err.value), (
            f"login {username!r}/{password!r}: {err.value}\nnode 0's log:\n{tls_cluster.log_tail(0)}")
    # The STOMP port speaks only TLS: a plain-text CONNECT gets no CONNECTED frame.
    plain = stomp_connect(node.host, node.port, *tls_cluster.credentials, timeout=3.0)
    assert not plain.ok, plain


def refused_tls_login(node: Node) -> tuple[list[str], int]:
    """One login the node refuses, on a bare stomp.py connection with the connector's TLS: the
    listener's events once the I/O thread ended, and the bytes the node sent. Fails when the
    thread still runs 20 s later or the events are not an ERROR and the end, or the end alone."""
    import stomp

    from clustermq.broker.stomp_tls import apply_tls

    events: list[str] = []
    received = 0

    class Events(stomp.ConnectionListener):
        def on_error(self, frame: stomp.utils.Frame) -> None:
            events.append("error")

        def on_disconnected(self) -> None:
            events.append("disconnected")

    conn = stomp.Connection12([(node.host, node.port)], reconnect_attempts_max=1, heartbeats=(0, 0))
    apply_tls(conn, node)  # the node carries the cluster's CA
    receive = conn.transport.receive

    def counting_receive() -> bytes | None:
        nonlocal received
        data: bytes | None = receive()
        received += len(data or b"")
        return data

    conn.transport.receive = counting_receive
    conn.set_listener("events", Events())
    conn.connect("clustermq", "not-the-password", wait=False)
    try:
        io_thread = conn.transport.io_thread
        io_thread.join(20)
        seen = list(events)  # before our own close, which stomp.py reports as a disconnect too
        assert not io_thread.is_alive() and seen in (["error", "disconnected"], ["disconnected"]), (
            f"20 s after the node refused the login: I/O thread alive {io_thread.is_alive()}, "
            f"listener events {seen}, {received} bytes received (want the ERROR, then the end "
            "of the connection)")
    finally:
        conn.transport.disconnect_socket()
    return seen, received


def test_a_tls_connection_the_node_closes_ends_with_on_disconnected(tls_cluster: LocalCluster) -> None:
    """A node that closes a TLS connection (here after refusing a login) ends it on the client:
    the ERROR frame first, then ``on_disconnected``, and stomp.py's I/O thread exits. stomp.py 9
    alone took the closed socket's empty reads for "no data yet": its I/O thread read on at 100 %
    of a core, ``on_disconnected`` never came, and a close from another thread then raced that
    thread inside OpenSSL (a segmentation fault in 2 of 3 runs of 900-1,800 refused logins;
    broker/tls_transport.py).

    Classic closes about 1 in 100 refused logins without writing the ERROR frame at all, over
    ``stomp+nio`` as over ``stomp+nio+ssl`` (broker-behaviour.md, "A refused login without an
    ERROR frame"): such an attempt must still end with ``on_disconnected``, and the client must
    have received no byte (the frame was never sent, not lost by the client). The test logs in
    until one attempt brings the ERROR, at most five times: five in a row without it would come
    about once in 10^9 tests at the highest rate measured (17 in 1,000); Artemis must answer the
    first (1,000 of 1,000 measured)."""
    node = tls_cluster.nodes()[0]
    attempts: list[tuple[list[str], int]] = []
    for _ in range(5):
        seen, received = refused_tls_login(node)
        attempts.append((seen, received))
        if seen == ["error", "disconnected"]:
            break
        assert tls_cluster.flavor == "classic" and received == 0, (
            f"a refused login ended without an ERROR frame on {tls_cluster.flavor} after "
            f"{received} bytes from the node (attempts so far: {attempts})")
    assert attempts[-1][0] == ["error", "disconnected"], (
        f"no refused login of {len(attempts)} brought the ERROR frame: {attempts}")


def test_wrong_ca_and_wrong_host_name_fail_clearly(tls_cluster: LocalCluster, other_ca: str) -> None:
    node = tls_cluster.nodes()[0]
    wrong = parse_connection_options(lowered(options(tls_cluster, "q", sslCaFile=other_ca, connectTimeout="5000")))
    started = time.monotonic()
    with pytest.raises(NodeUnavailable) as err:
        open_connection(wrong.nodes[0], wrong)
    assert time.monotonic() - started < 10
    text = str(err.value)
    assert node.name in text and "certificate failed verification" in text and other_ca in text, text

    # A name the certificate does not carry (127.1 reaches 127.0.0.1): refused by default, ...
    renamed = tls_cluster.brokers.replace("127.0.0.1", "127.1")
    by_name = lowered(options(tls_cluster, "q", brokers=renamed))
    with pytest.raises(NodeUnavailable, match="Hostname mismatch"):
        open_connection(parse_connection_options(by_name).nodes[0], parse_connection_options(by_name))
    # ... accepted with sslVerifyHostname=false, the chain still verified against the CA.
    relaxed = parse_connection_options({**by_name, "sslverifyhostname": "false"})
    conn, connected = open_connection(relaxed.nodes[0], relaxed)
    close_connection(conn)
    assert "server" in connected
    relaxed_wrong = parse_connection_options({**by_name, "sslverifyhostname": "false", "sslcafile": other_ca})
    with pytest.raises(NodeUnavailable, match="certificate failed verification"):
        open_connection(relaxed_wrong.nodes[0], relaxed_wrong)

    # The other paths that open connections say the same: the load generator and the depth probe.
    with pytest.raises(NodeUnavailable, match="certificate failed verification"):
        produce(wrong, LoadSpec(count=1))
    username, password = tls_cluster.credentials
    depths = queue_depths(wrong.nodes, "q", username, password, timeout=5.0)
    assert all(d is None for d in depths.values())
    assert all("certificate failed verification" in e for e in depths.errors.values()), depths.errors


def test_each_tls_failure_is_classified_tls_and_a_wrong_password_login(
    tls_cluster: LocalCluster, other_ca: str
) -> None:
    """What the error's kind says on a TLS cluster: a wrong CA and a plain-text connection to
    the TLS port are ``[TLS]`` (the latter says to write ``stomp+ssl://``), a refused password
    over TLS is ``[login]``; no message shows the password."""
    from clustermq.errors import LOGIN, TLS

    node = tls_cluster.nodes()[0]
    wrong_ca = parse_connection_options(lowered(options(tls_cluster, "q", sslCaFile=other_ca, connectTimeout="5000")))
    plain_opts = {**options(tls_cluster, "q", connectTimeout="5000"), "brokers": f"{node.host}:{node.port}"}
    del plain_opts["sslCaFile"]
    plain = parse_connection_options(lowered(plain_opts))
    wrong_pw = parse_connection_options(lowered(options(tls_cluster, "q", password="wrong-" + PASSWORD,
                                                        connectTimeout="20000")))
    found = {}
    for name, conn in (("wrong CA", wrong_ca), ("plain text", plain), ("wrong password", wrong_pw)):
        with pytest.raises(NodeUnavailable) as err:
            open_connection(conn.nodes[0], conn)
        assert PASSWORD not in str(err.value)
        found[name] = err.value
    assert found["wrong CA"].kind == TLS and "certificate failed verification" in str(found["wrong CA"])
    assert found["plain text"].kind == TLS, found["plain text"]
    assert f"stomp+ssl://{node.host}:{node.port}" in str(found["plain text"])
    assert found["wrong password"].kind == LOGIN and "[login] login failed" in str(found["wrong password"])


def test_tls_round_trip_and_the_password_is_nowhere(
    spark: SparkSession, tls_cluster: LocalCluster, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Write with the clustermq writer and drain with AvailableNow over TLS (exact counts, depth
    0), with the connector's and stomp.py's loggers at DEBUG; then a wrong-password query. The
    password must appear in no log line, error, progress report or ``repr()``."""
    from clustermq.source import ClusterMQDataSource

    queue = new_queue("roundtrip")
    opts = options(tls_cluster, queue)
    total = 240
    started = time.monotonic()
    with CapturedLogs() as logs:
        rows = [(f"body-{i}", f"g{i % 6}") for i in range(total)]
        (spark.createDataFrame(rows, "body string, group_id string").repartition(2)
         .write.format("clustermq").mode("append").options(**opts).save())

        out = tmp_path / "out"
        query = (
            spark.readStream.format("clustermq").options(**opts, maxMessagesPerTrigger="100").load()
            .writeStream.format("parquet").option("path", str(out))
            .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
        )
        assert query.awaitTermination(180), "AvailableNow query did not finish"
        assert query.exception() is None, query.exception()
        read = spark.read.parquet(str(out))
        bodies = sorted(bytes(r["body"]).decode() for r in read.select("body").collect())
        assert bodies == sorted(body for body, _ in rows)
        assert read.select("message_id").distinct().count() == total
        assert {r["node"] for r in read.select("node").distinct().collect()} <= {n.name for n in tls_cluster.nodes()}
        depths = wait_depth_zero(tls_cluster, queue)
        assert all(d == 0 for d in depths.values()), depths
        progress = json.dumps([json.loads(p.json) for p in query.recentProgress])
        last = query.lastProgress
        progress += (last.json if hasattr(last, "json") else json.dumps(last)) + str(query.status)
        print(f"write + AvailableNow read: {time.monotonic() - started:.1f} s")

        wrong = {**opts, "password": PASSWORD[::-1] + "-wrong", "noNodeTimeout": "3000"}
        bad = (
            spark.readStream.format("clustermq").options(**wrong).load()
            .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp-bad")).start()
        )
        try:
            with pytest.raises(Exception) as failure:
                bad.awaitTermination(90)
        finally:
            bad.stop()
        failure_text = str(failure.value)
        print(f"wrong-password query failed after {time.monotonic() - started:.1f} s")

    source = ClusterMQDataSource(lowered(opts))
    reprs = " ".join(repr(x) for x in (
        source, source.streamReader(source.schema()), ReadOptions.parse(lowered(opts)),
        WriteOptions.parse(lowered(opts)), parse_connection_options(lowered(opts)),
    ))
    out_err = capfd.readouterr()
    assert "login failed" in failure_text, failure_text[-2000:]
    assert "passcode:***" in logs.text, "stomp.py did not log its CONNECT frames at DEBUG"
    for where, text in (("captured logs", logs.text), ("progress", progress), ("error", failure_text),
                        ("repr", reprs), ("stdout/stderr (JVM, workers)", out_err.out + out_err.err)):
        assert PASSWORD not in text, f"password found in {where}"
        assert wrong["password"] not in text, f"wrong password found in {where}"


def test_jobs_measure_the_backlog_over_tls_with_the_readers_ca(tls_cluster: LocalCluster) -> None:
    """export_backlog's depth probe connects as the reader does: with ``sslCaFile`` it gets
    every node's depth; without it (system trust store) the nodes are reported unreachable."""
    from clustermq.pipelines.streaming import measure_backlog

    queue = new_queue("backlog")
    produced = produce(parse_connection_options(lowered(options(tls_cluster, queue))),
                       LoadSpec(count=30))
    total, table = measure_backlog(options(tls_cluster, queue))
    assert total == sum(produced.values()) == 30, table
    assert PASSWORD not in table
    without_ca = {k: v for k, v in options(tls_cluster, queue, connectTimeout="3000").items()
                  if k != "sslCaFile"}
    total, table = measure_backlog(without_ca)
    assert total is None, table
    with pytest.raises(OptionError, match="maxMessagesPerTrigger"):
        measure_backlog(options(tls_cluster, queue, maxMessagesPerTrigger="-1"))


@pytest.mark.flavors("classic")
def test_job_driver_and_worker_debug_logs_hold_no_password(tls_cluster: LocalCluster, tmp_path: Path) -> None:
    """``spark_jobs/queue_to_delta.py`` over TLS, every Python process of it (driver, source
    runner, workers) logging ``clustermq`` and ``stomp.py`` at DEBUG into one file through a
    ``sitecustomize`` on ``PYTHONPATH``; its output and that file must not hold the password.

    Runs on Classic only: what it proves (the filter is installed in every process of
    a job) does not depend on the broker, and a fresh Spark JVM with Delta costs minutes on a
    loaded 2-core machine (178 s measured at load 15-20)."""
    queue = new_queue("job")
    produce(parse_connection_options(lowered(options(tls_cluster, queue))), LoadSpec(count=120, groups=3))
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import logging, os\n"
        "_h = logging.FileHandler(os.environ['CLUSTERMQ_TEST_DEBUG_LOG'])\n"
        "_h.setFormatter(logging.Formatter('%(process)d %(name)s %(levelname)s %(message)s'))\n"
        "for _n in ('clustermq', 'stomp.py'):\n"
        "    logging.getLogger(_n).setLevel(logging.DEBUG)\n"
        "    logging.getLogger(_n).addHandler(_h)\n"
    )
    debug_log = tmp_path / "debug.log"
    username, password = tls_cluster.credentials
    env = dict(os.environ, CLUSTERMQ_USERNAME=username, CLUSTERMQ_PASSWORD=password, PYTHONUNBUFFERED="1",
               CLUSTERMQ_TEST_DEBUG_LOG=str(debug_log),
               PYTHONPATH=os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p))
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "spark_jobs" / "queue_to_delta.py"), "--brokers", tls_cluster.brokers,
         "--queue", queue, "--table", str(tmp_path / "table"), "--checkpoint", str(tmp_path / "cp"),
         "--trigger", "availableNow", "--option", f"sslCaFile={tls_cluster.ca_file}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    assert proc.returncode == 0, output[-4000:]
    depths = wait_depth_zero(tls_cluster, queue)
    assert all(d == 0 for d in depths.values()), depths
    debug = debug_log.read_text(errors="replace")
    assert "passcode:***" in debug, "the job's processes did not log CONNECT frames at DEBUG"
    assert PASSWORD not in output, "password in the job's driver output"
    assert "UNEXPECTED_EOF_WHILE_READING" not in output  # demoted to DEBUG (QuietTlsShutdown)
    assert PASSWORD not in debug, "password in the job's DEBUG log"
