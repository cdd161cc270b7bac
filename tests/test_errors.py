"""Errors without brokers: one base for every deliberate error, and why a node is unreachable.

* Static: no module of the connector raises a built-in (or other foreign) exception class on
  purpose; each deliberate error is a :class:`ClusterMQError` that also derives from the
  built-in a caller may already catch.
* Unreachable nodes, with real sockets on loopback and nothing mocked: a closed port (refused),
  a name under ``.invalid`` (DNS, RFC 6761: never resolves), a port whose accept queue is full
  (timeout: the kernel drops the SYN), a listening socket that accepts and stays silent
  (timeout: a dead peer, not a broker), and ``stomp+ssl://`` to that silent peer (TLS). The
  login case and TLS against real brokers: tests/test_security.py and tests/test_bad_input.py.
* ``transport=amqp`` without python-qpid-proton, simulated the way Python itself reports a
  missing module (``sys.modules['proton'] = None``) in a child interpreter.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import pickle
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermq import errors
from clustermq.broker.nodes import Node
from clustermq.broker.stomp_connection import open_connection
from clustermq.devtools.localcluster.ports import free_ports
from clustermq.errors import (
    DNS,
    REFUSED,
    TIMEOUT,
    TLS,
    UNREACHABLE_KINDS,
    ClusterMQError,
    NodeUnavailable,
    NoNodeReachable,
    NoWritableNode,
    OptionError,
)
from clustermq.options import ReadOptions, WriteOptions, parse_connection_options

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "connector" / "clustermq"
#: parts of the package this check leaves out: the development tools, and the jobs, whose
#: ``main`` turns errors into one line and an exit code (their own tests cover them)
NOT_CHECKED = ("devtools", "jobs")
PASSWORD = "pw-never-shown-" + "x" * 6

#: built-ins that may be raised: they do not report a condition to the user
ALLOWED_BUILTINS = {
    "NotImplementedError": "a dialect without an operation; callers catch it and choose another way",
    "StopIteration": "the iterator protocol",
}
#: (module path, raised class) -> why a foreign exception is right there
ALLOWED_FOREIGN = {
    ("broker/stomp_tls.py", "ssl.SSLError"): (
        "raised inside OpenSSL's key-password callback, which OpenSSL turns into the handshake's "
        "own SSLError; tls_failure() words it, and options/tls_options.py refuses an encrypted key first"
    ),
    ("read/worker_exit.py", "SystemExit"): (
        "the source worker's SIGTERM turned into the exit that unwinds through the runner's "
        "finally (the reader's stop); it is the process ending, never an error to catch"
    ),
    ("broker/tls_transport.py", "stomp_exception.InterruptedException"): (
        "stomp.py's own signal to its read loop (retry the read), raised where stomp.py's "
        "receive() raises it; it never leaves stomp.py's I/O thread"
    ),
    ("broker/tls_transport.py", "stomp_exception.ConnectionClosedException"): (
        "stomp.py's own signal to its I/O loop that the stream ended (it then notifies "
        "on_disconnected); it never leaves stomp.py's I/O thread"
    ),
    ("pipelines/delta_sink.py", "RuntimeError"): (
        "a programming error of the sink's caller (set_app_id before the first batch), never a "
        "user condition"
    ),
}


# ----------------------------------------------------------------------------- static check
def checked_modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in NOT_CHECKED:
            continue
        yield rel.as_posix(), path


def imported_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted origin, for every import of the module (any depth)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    names[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def resolve(dotted: str) -> object:
    """The object ``a.b.C`` names (``None`` if it cannot be imported)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def raised_class(exc: ast.expr, names: dict[str, str]) -> tuple[str, type[BaseException]] | None:
    """``(as written, class)`` when ``raise`` names an exception class (called or not); ``None``
    for anything else: a caught variable, a call of a function that builds the error."""
    target = exc.func if isinstance(exc, ast.Call) else exc
    written = ast.unparse(target)
    if isinstance(target, ast.Name):
        if target.id in names:
            obj = resolve(names[target.id])
        else:
            obj = getattr(builtins, target.id, None)
    elif isinstance(target, ast.Attribute):
        root = written.split(".")[0]
        obj = resolve(names[root] + written[len(root):]) if root in names else None
    else:
        return None
    if isinstance(obj, type) and issubclass(obj, BaseException):
        return written, obj
    return None


def foreign_raises(rel: str, source: str) -> list[str]:
    """``line: raise X`` for every raise of an exception class outside the hierarchy."""
    tree = ast.parse(source)
    names = imported_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        hit = raised_class(node.exc, names)
        if hit is None:
            continue
        written, cls = hit
        if issubclass(cls, ClusterMQError) or written in ALLOWED_BUILTINS:
            continue
        if (rel, written) in ALLOWED_FOREIGN:
            continue
        found.append((node.lineno, f"{node.lineno}: raise {written}"))
    return [text for _, text in sorted(found)]


def test_every_deliberate_error_is_a_clustermq_error() -> None:
    """A ``raise`` of a built-in (or a library's) exception class escapes ``except
    ClusterMQError``: define a class in errors.py (with the built-in as a second base) instead."""
    problems = [f"connector/clustermq/{rel}:{hit}"
                for rel, path in checked_modules() for hit in foreign_raises(rel, path.read_text())]
    assert not problems, "\n".join(problems)


def test_the_static_check_finds_what_it_must_and_nothing_else() -> None:
    sample = textwrap.dedent('''
        import ssl
        from clustermq.errors import OptionError
        from socket import timeout as SocketTimeout

        def f(x):
            if x == 1:
                raise ValueError("bad")
            if x == 2:
                raise ssl.SSLError("bad")
            if x == 3:
                raise SocketTimeout()
            if x == 4:
                raise OptionError("fine")
            if x == 5:
                raise NotImplementedError("allowed")
            try:
                pass
            except OSError as exc:
                raise exc
            except KeyError:
                raise
            raise make_error(x)
    ''')
    found = foreign_raises("sample.py", sample)
    assert [f.split(": ", 1)[1] for f in found] == ["raise ValueError", "raise ssl.SSLError",
                                                   "raise SocketTimeout"], found


def test_every_error_class_also_is_the_builtin_a_caller_catches() -> None:
    """Besides the abstract bases, each class derives from a built-in exception other than
    ``Exception`` (``ValueError`` for bad input, ``ConnectionError`` for the cluster, ...)."""
    abstract = {"ClusterMQError", "BrokerError", "LinkLost"}
    for name in errors.__all__:
        cls = getattr(errors, name)
        if name in abstract:
            continue
        builtin = [b for b in cls.__mro__ if b.__module__ == "builtins" and b not in (Exception, BaseException, object)]
        assert builtin, f"{name} derives from no built-in exception but Exception"


def test_node_errors_survive_pickling_with_their_kind() -> None:
    node = Node("mq1", 61613)
    err = NodeUnavailable(node, "nothing accepts connections", REFUSED)
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.kind, back.reason, back.node) == (str(err), REFUSED, err.reason, node)
    assert str(err) == "broker node mq1:61613: [refused] nothing accepts connections"
    whole = NoNodeReachable("none", [err])
    assert pickle.loads(pickle.dumps(whole)).args == ("none",)
    assert issubclass(NoWritableNode, NoNodeReachable) and issubclass(NoNodeReachable, ConnectionError)


# ----------------------------------------------------------------------------- unreachable nodes
@pytest.fixture
def silent_peer() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word: a hung node, not a broker."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join(2)
        for conn in accepted:
            conn.close()
        server.close()


def read_options(brokers: str, **extra: str) -> ReadOptions:
    return ReadOptions.parse({"brokers": brokers, "queue": "q", "username": "u", "password": PASSWORD,
                              "connecttimeout": "1000", **extra})


def unreachable(options: ReadOptions) -> NodeUnavailable:
    with pytest.raises(NodeUnavailable) as err:
        open_connection(options.connection.nodes[0], options.connection)
    assert PASSWORD not in str(err.value)
    return err.value


def test_a_closed_port_is_refused(free_port: int) -> None:
    started = time.monotonic()
    err = unreachable(read_options(f"127.0.0.1:{free_port}"))
    assert err.kind == REFUSED and time.monotonic() - started < 5
    assert str(err).startswith(f"broker node 127.0.0.1:{free_port}: [refused] nothing accepts connections")
    assert "Connection refused" in str(err)  # the raw reason


def test_a_closed_port_is_refused_with_a_tiny_timeout_too(free_port: int) -> None:
    """stomp.py sleeps ~0.2 s after a failed attempt: longer than a tiny connectTimeout, which
    must not make a refusal look like a timeout."""
    err = unreachable(read_options(f"127.0.0.1:{free_port}", connecttimeout="50"))
    assert err.kind == REFUSED, err


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A port whose accept queue is full (Linux then drops further SYNs): a TCP connect to it
    never completes, as to a host behind a firewall that drops packets."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = int(server.getsockname()[1])
    waiting: list[socket.socket] = []
    try:
        for _ in range(8):
            client = socket.socket()
            client.settimeout(0.5)
            waiting.append(client)
            try:
                client.connect(("127.0.0.1", port))
            except TimeoutError:
                break
        else:
            pytest.fail("the accept queue never filled: this kernel does not drop SYNs")
        yield port
    finally:
        for client in waiting:
            client.close()
        server.close()


def test_a_connect_that_never_completes_is_a_timeout(full_backlog: int) -> None:
    err = unreachable(read_options(f"127.0.0.1:{full_backlog}"))
    assert err.kind == TIMEOUT, err
    assert "[timeout] no TCP connection within 1.0 s (option connectTimeout)" in str(err)


def test_a_name_that_does_not_resolve_is_dns() -> None:
    err = unreachable(read_options("no-such-host.invalid:61613"))
    assert err.kind == DNS
    assert "[DNS] the host name 'no-such-host.invalid' does not resolve (" in str(err)


def test_a_peer_that_never_answers_is_a_timeout(silent_peer: int) -> None:
    started = time.monotonic()
    err = unreachable(read_options(f"127.0.0.1:{silent_peer}"))
    assert err.kind == TIMEOUT and time.monotonic() - started < 5
    assert "[timeout] connected, but no CONNECTED frame within 1.0 s (option connectTimeout)" in str(err)


def test_tls_to_a_port_that_does_not_answer_tls_is_tls(silent_peer: int) -> None:
    err = unreachable(read_options(f"stomp+ssl://127.0.0.1:{silent_peer}"))
    assert err.kind == TLS
    assert "[TLS] no TLS handshake answer within 1.0 s" in str(err) and "stomp://" in str(err)


def test_a_failover_group_names_each_member_and_one_kind() -> None:
    a, b = free_ports(2)
    err = unreachable(read_options(f"masterslave:(127.0.0.1:{a},127.0.0.1:{b})"))
    assert err.kind == REFUSED
    assert f"127.0.0.1:{a}: [refused]" in str(err) and f"127.0.0.1:{b}: [refused]" in str(err)


def cluster_of_every_kind(silent_peer: int) -> tuple[str, list[tuple[str, str]]]:
    """A ``brokers`` value whose nodes fail in three different ways, and what each must say."""
    (closed,) = free_ports(1)
    refused = f"127.0.0.1:{closed}"
    expected = [(refused, "[refused]"), ("no-such-host.invalid:61613", "[DNS]"),
                (f"127.0.0.1:{silent_peer}", "[timeout]")]
    return ",".join(name for name, _ in expected), expected


def assert_names_every_node(err: NoNodeReachable, expected: list[tuple[str, str]]) -> None:
    text = str(err)
    assert "no broker node is reachable" in text and "(option brokers)" in text, text
    for name, kind in expected:
        assert f"broker node {name}: {kind}" in text, text
    assert sorted(f.node.name for f in err.failures) == sorted(name for name, _ in expected)
    assert all(f.kind in UNREACHABLE_KINDS for f in err.failures)
    assert PASSWORD not in text


def test_the_reader_start_names_every_node_and_why(silent_peer: int) -> None:
    from clustermq.read.consumer import ClusterConsumer

    brokers, expected = cluster_of_every_kind(silent_peer)
    consumer = ClusterConsumer(read_options(brokers))
    try:
        with pytest.raises(NoNodeReachable) as err:
            consumer.start()
    finally:
        consumer.stop()
    assert "to start reading queue 'q'" in str(err.value)
    assert_names_every_node(err.value, expected)


def test_a_batch_read_names_every_node_and_why_before_any_task(silent_peer: int) -> None:
    from clustermq.read.browse import ClusterMQBatchReader

    brokers, expected = cluster_of_every_kind(silent_peer)
    for flavor in ("auto", "classic"):
        with pytest.raises(NoNodeReachable) as err:
            ClusterMQBatchReader(read_options(brokers, flavor=flavor)).partitions()
        assert "for the batch read of queue 'q'" in str(err.value)
        assert_names_every_node(err.value, expected)


def test_the_writer_names_every_node_and_why(silent_peer: int) -> None:
    """A batch write fails on the driver before any task runs; a direct write's task fails
    with ``NoWritableNode``, a ``NoNodeReachable`` naming every node too."""
    from clustermq.write.layout import InputLayout
    from clustermq.write.modes import Direct
    from clustermq.write.spark import ClusterMQBatchWriter
    from clustermq.write.task import TaskIdentity, write_task

    brokers, expected = cluster_of_every_kind(silent_peer)
    raw = {"brokers": brokers, "queue": "q", "username": "u", "password": PASSWORD, "connecttimeout": "1000"}
    layout = InputLayout(body="body", body_is_text=True)
    with pytest.raises(NoNodeReachable) as err:
        ClusterMQBatchWriter(WriteOptions.parse(raw), layout)
    assert "for writing to queue 'q'" in str(err.value)
    assert_names_every_node(err.value, expected)

    import pyarrow as pa

    direct = WriteOptions.parse({**raw, "writemode": "direct"})
    rows = iter([pa.RecordBatch.from_pydict({"body": ["a", "b"]})])
    with pytest.raises(NoNodeReachable) as task_err:
        write_task(direct, layout, TaskIdentity("job", 0, 0, 0), rows, Direct())
    assert isinstance(task_err.value, NoWritableNode)
    text = str(task_err.value)
    for name, kind in expected:
        assert f"{name}: {kind}" in text, text
    assert PASSWORD not in text


def test_the_amqp_link_names_each_node_and_why() -> None:
    """``transport=amqp`` classifies its endpoints' failures the same way."""
    pytest.importorskip("proton")
    from clustermq.read.consumer import ClusterConsumer

    stomp, other, amqp = (f"127.0.0.1:{port}" for port in free_ports(3))
    options = read_options(f"{stomp},{other}", transport="amqp",
                           amqpbrokers=f"{amqp},no-such-host.invalid:5672")
    consumer = ClusterConsumer(options)
    try:
        with pytest.raises(NoNodeReachable) as err:
            consumer.start()
    finally:
        consumer.stop()
    assert sorted(f.kind or "" for f in err.value.failures) == sorted([REFUSED, DNS])
    assert f"broker node {stomp}: [refused] AMQP: {amqp} (amqpBrokers): nothing accepts" in str(err.value)


# ----------------------------------------------------------------------------- amqp extra
def run_without_proton(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child interpreter where ``import proton`` fails as for a package that
    is not installed."""
    prelude = "import sys\nsys.modules['proton'] = None  # what Python does for a blocked import\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_transport_amqp_without_proton_names_the_option_and_the_extra() -> None:
    done = run_without_proton('''
        from clustermq.errors import OptionError
        from clustermq.options import ReadOptions
        assert ReadOptions.parse({"brokers": "a:61613", "queue": "q"}).transport == "stomp"
        try:
            ReadOptions.parse({"brokers": "a:61613", "queue": "q", "transport": "amqp",
                               "amqpbrokers": "a:5672"})
        except OptionError as exc:
            print(exc)
        else:
            raise SystemExit("no OptionError")
    ''')
    assert done.returncode == 0, done.stdout + done.stderr
    assert "option 'transport'" in done.stdout and "python-qpid-proton" in done.stdout
    assert "pip install 'clustermq[amqp]'" in done.stdout


#: the modules of the AMQP transport, the only ones that import proton (the ``amqp`` extra)
AMQP_MODULES = ["read/amqp_attach.py", "read/amqp_browse.py", "read/amqp_link.py"]


def test_the_data_source_loads_without_proton() -> None:
    """Only the AMQP modules import proton: every other module of the connector imports (and a
    STOMP read's options parse) where the ``amqp`` extra is not installed."""
    modules = sorted(
        ".".join(("clustermq", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
        for p in PACKAGE.rglob("*.py")
        if p.relative_to(PACKAGE).parts[0] != "devtools" and p.relative_to(PACKAGE).as_posix() not in AMQP_MODULES
    )
    done = run_without_proton(f'''
        import importlib
        for name in {modules!r}:
            importlib.import_module(name)
        import pyspark_clustermq
        print("imported", len({modules!r}))
    ''')
    assert done.returncode == 0, done.stdout + done.stderr


def test_nothing_but_the_amqp_modules_import_proton_at_module_level() -> None:
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:  # module level only
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "proton" or n.startswith("proton.") for n in names):
                importers.append(path.relative_to(PACKAGE).as_posix())
    assert sorted(set(importers)) == AMQP_MODULES


def test_an_option_error_is_still_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_connection_options({"brokers": "a:notaport", "queue": "q"})
    with pytest.raises(OptionError, match="option 'brokers'"):
        parse_connection_options({"brokers": "a:notaport", "queue": "q"})
