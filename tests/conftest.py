"""Shared fixtures: one local Spark session and one local broker cluster per test session."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from clustermq.broker.connection_options import ConnectionOptions
    from clustermq.devtools.localcluster import LocalCluster
    from spark_standalone import StandaloneCluster

ROOT = Path(__file__).resolve().parents[1]
#: What a deployment would configure for the jobs the tests start as plain ``python -m
#: clustermq.jobs.<job>`` or ``python spark_jobs/<job>.py`` (the jobs themselves set none of it): a local master sized for 2 cores,
#: no UI, WARN. Plain ``python`` hands PYSPARK_SUBMIT_ARGS to the spark-submit it launches, as a
#: user's environment would. (Not a spark-defaults.conf: SPARK_CONF_DIR goes on the JVM's class
#: path, and a non-empty directory there stops the JDK from writing the suite's CDS archive.)
JOB_SPARK_SETTINGS = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.log.level": "WARN",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.streaming.stopActiveRunOnRestart": "true",
}
JOB_SUBMIT_ARGS = " ".join(
    ["--master local[2]", *(f"--conf {k}={v}" for k, v in JOB_SPARK_SETTINGS.items()), "pyspark-shell"]
)
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", JOB_SUBMIT_ARGS)

# Every Spark JVM the suite starts (its own session, each job's driver: they inherit the
# environment) compiles with C1 only. On 2 cores the C2 compiler threads compete with the work
# itself: a queue_to_delta restart (JVM start plus a cold first batch of 2,500 messages) took
# 36 s with the default tiered compiler and 26 s with C1 alone, and its warm batches were no
# slower (measured on the same cluster and table). The tests measure correctness; `make bench`
# does not go through this file and runs the JVM's defaults.
# C1 alone also shrinks the JVM's default code cache to 48 MB (the tiered default is 240 MB),
# and the suite's session JVM outgrows that: it compiles every method that gets warm and keeps
# it, one run filled the cache after some 30,000 of them, the JVM turned its compiler off and a
# query then failed with "VirtualMachineError: Out of space in CodeCache for adapters". So the
# suite keeps the tiered default's size; sampled every 20 s with `jcmd <pid> Compiler.codecache`
# through a whole suite run, the session JVM used 50 MB after 8 minutes and 71 MB at most.
C1_ONLY = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


def _spark_jvm_options(config: pytest.Config) -> str:
    """C1 only, plus the suite's class-data-sharing archive of Spark's classes when it can be
    made (tests/spark_cds.py: about 40 s once per venv, then some 4-5 s off every Spark JVM
    start, of which the suite has dozens)."""
    from clustermq.pipelines.spark_home import use_bytecode_home
    from spark_cds import spark_archive

    # Every Spark JVM of the suite runs from one home, so they all match the archive's class path.
    use_bytecode_home()
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    report = terminal.write_line if terminal is not None else print
    archive = spark_archive(C1_ONLY, report)
    return C1_ONLY if archive is None else f"{C1_ONLY} -XX:SharedArchiveFile={archive}"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The suite's one Spark session, with Delta: Delta's jars must be on the class path when
    the JVM starts, so the first session of the process has to carry them."""
    from sparksession import local_session

    # Spark's Python workers must import test modules that define probe sources.
    paths = [str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    session = local_session("clustermq-tests", {"spark.sql.shuffle.partitions": "2"}, delta=True)
    yield session
    session.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


#: Ports of the suite's parallel workers (``make test``, two by default): worker *i* chooses
#: every port it needs (its clusters, proxies, Spark servers) from its own block, below the
#: kernel's ephemeral range (32768-60999 on Linux), so two workers starting clusters at the same
#: moment are never handed the same free port (clustermq.devtools.localcluster.ports).
WORKER_PORTS_FROM = 20000
WORKER_PORTS = 3000


def _worker_port_range() -> None:
    from clustermq.devtools.localcluster.ports import PORT_RANGE_ENV

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ... (set by pytest-xdist)
    if worker.startswith("gw") and PORT_RANGE_ENV not in os.environ:
        low = WORKER_PORTS_FROM + int(worker[2:]) * WORKER_PORTS
        os.environ[PORT_RANGE_ENV] = f"{low}-{low + WORKER_PORTS - 1}"


def pytest_configure(config: pytest.Config) -> None:
    # A run stopped with SIGTERM (a CI timeout, ``kill``) would otherwise die without its
    # fixtures' teardown and leave its brokers and Spark servers running; as an interrupt,
    # pytest tears down as after Ctrl-C and every process is stopped by pid.
    signal.signal(signal.SIGTERM, _interrupt)
    _worker_port_range()
    config.addinivalue_line(
        "markers",
        "flavors(*names): run only against these broker flavors; the test's other flavor "
        "variants are deselected (not skipped): they do not exist for that flavor",
    )
    config.addinivalue_line(
        "markers",
        "one_flavor: the test proves how the package or Spark is deployed, and the broker is "
        "only its source: it runs against the first flavor of CLUSTERMQ_FLAVORS only (another "
        "flavor would run the same code paths again)",
    )


#: Fixtures that start real processes, and the marker a test using one (directly or through
#: another fixture) gets. ``make unit`` selects ``-m "not cluster and not spark"``: a test that
#: needs a broker or Spark cannot slip into the fast run by forgetting its marker.
PROCESS_FIXTURES = {
    "cluster": "cluster", "broker": "cluster", "tls_cluster": "cluster", "standalone": "spark",
    "spark": "spark",
}


def _mark_by_fixtures(item: pytest.Item) -> None:
    for fixture in getattr(item, "fixturenames", ()):
        marker = PROCESS_FIXTURES.get(fixture)
        if marker is not None and item.get_closest_marker(marker) is None:
            item.add_marker(marker)


def _check_own_cluster(item: pytest.Item) -> None:
    """A test of an ``OWN_CLUSTER_MODULES`` module that needs the session cluster would make the
    worker it lands on start that flavor's whole cluster again: refused at collection."""
    if item.nodeid.partition("::")[0] in OWN_CLUSTER_MODULES:
        used = SESSION_CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ()))
        if used:
            raise pytest.UsageError(
                f"{item.nodeid} uses the session cluster ({', '.join(sorted(used))}); its module is in "
                "OWN_CLUSTER_MODULES (tests/conftest.py), whose tests must use their module's own clusters")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests by the processes their fixtures start; drop the flavor variants a
    ``@pytest.mark.flavors(...)`` test does not apply to, and all but the first flavor's of a
    ``@pytest.mark.one_flavor`` test."""
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        _mark_by_fixtures(item)
        _check_own_cluster(item)
        marker = item.get_closest_marker("flavors")
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        # the flavor of whichever cluster fixture the test uses (session, TLS, pairs, members)
        flavor = next((v for v in params.values() if isinstance(v, str) and v in ALL_FLAVORS), None)
        wanted = marker.args if marker else ()
        if item.get_closest_marker("one_flavor"):
            wanted = (cluster_flavors()[0],)
        (drop if wanted and flavor and flavor not in wanted else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    # Only a run that starts Spark pays for the archive; a value set by the caller wins.
    if "SPARK_SUBMIT_OPTS" not in os.environ and any(
        item.get_closest_marker("spark") or item.get_closest_marker("cluster")
        or "spark" in getattr(item, "fixturenames", ()) for item in items
    ):
        os.environ["SPARK_SUBMIT_OPTS"] = _spark_jvm_options(config)


#: Modules whose tests start clusters of their own (module-scoped fixtures: joining and leaving
#: members, failover pairs, TLS) and never use the session cluster. Under ``-n 2`` they go by
#: module, to whichever worker is free, instead of lengthening their flavor's worker: in a
#: clean-clone run on two workers the Classic worker ran 30:22 and the other 26:06.
#: ``pytest_collection_modifyitems`` refuses a test of theirs that needs the session cluster.
OWN_CLUSTER_MODULES = frozenset({"tests/test_membership.py", "tests/test_pairs.py", "tests/test_security.py"})
SESSION_CLUSTER_FIXTURES = frozenset({"cluster", "broker"})


def worker_group(nodeid: str) -> str:
    """Which tests run on one worker under ``pytest -n N``: a flavor's, or a module's.

    A flavor's tests share one worker, which starts that flavor's session and module clusters
    once; the two flavors run side by side, on a machine whose cores the serial suite left idle
    about half the time while brokers and Spark waited on each other. A test of no flavor goes
    with the rest of its module, so a module's fixtures (a wheel, a Spark Connect server) start
    once. Read from the test id (the scheduler sees ids only): the flavor is the cluster
    fixture's parameter, one of the ``-``-separated parts in ``[...]``.
    """
    path, _, rest = nodeid.partition("::")
    if path in OWN_CLUSTER_MODULES:
        return path
    params = rest[rest.find("[") + 1:-1] if rest.endswith("]") else ""
    return next((part for part in params.split("-") if part in ALL_FLAVORS), path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scope scheduler with ``worker_group`` as the scope: the largest groups
    (the flavors) go out first, one per worker, and a worker that finishes takes the modules
    left. (xdist's own ``--dist loadgroup`` marks do not reach pytest 9's test ids.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByFlavor(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return ByFlavor(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test that fails has every running broker node of its worker print its threads' stacks
    into its log, at once, before teardown restarts or stops anything: a node that stopped
    answering (no CONNECTED frame, no RECEIPT) is then seen where it stood, next to its
    ``gc.log`` (LocalCluster.dump_threads). The report names the clusters and the line the dump
    follows."""
    report: pytest.TestReport = yield
    if report.failed and report.when == "call":
        dumped = _dump_broker_threads(item)
        if dumped:
            report.sections.append(("clustermq: broker thread dumps", "\n".join(dumped)))
    return report


#: where a cluster's state file can sit under the worker's base temp: a session or module
#: cluster (``cluster-classic0/``), or one a test started in its own ``tmp_path``
CLUSTER_STATE_GLOBS = ("*/cluster.json", "*/*/cluster.json")


def _dump_broker_threads(item: pytest.Item) -> list[str]:
    import time

    from clustermq.devtools.localcluster import LocalCluster

    factory = getattr(item.config, "_tmp_path_factory", None)
    if factory is None:
        return []
    base = factory.getbasetemp()
    note = f"clustermq: thread dump: {item.nodeid} failed at {time.strftime('%Y-%m-%dT%H:%M:%S')}"
    lines = []
    # resolved: pytest links ``<name>current`` to the newest ``<name><n>``
    for state_file in sorted({f.resolve() for pattern in CLUSTER_STATE_GLOBS for f in base.glob(pattern)}):
        try:
            nodes = LocalCluster(state_file.parent).dump_threads(note)
        except (OSError, ValueError, RuntimeError) as exc:
            lines.append(f"{state_file.parent}: no thread dump ({type(exc).__name__}: {exc})")
            continue
        if nodes:
            lines.append(f"{state_file.parent}: nodes {nodes}, in node<i>/broker.log after '{note}'")
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    """A failing run ends with what a reader needs first: the failed tests, and where the
    broker logs and the kept ``--basetemp`` are (each test's own output is in its report
    above). A long run's failures otherwise sit hundreds of lines up."""
    failed = [r for key in ("failed", "error") for r in terminalreporter.stats.get(key, ())]
    if not failed:
        return
    write = terminalreporter.write_line
    terminalreporter.section("clustermq: what failed and where its logs are", sep="=")
    for report in failed:
        write(f"  {report.when:8} {report.nodeid}  ({getattr(report, 'duration', 0.0):.0f} s)")
    basetemp = terminalreporter.config.getoption("basetemp", None)
    if basetemp and Path(basetemp).is_dir():
        clusters = sorted({log.parent.parent for log in Path(basetemp).glob("**/node*/broker.log")})
        write(f"kept for the post-mortem: {Path(basetemp).resolve()}")
        for cluster_dir in clusters:
            write(f"  broker logs: {cluster_dir}/node*/broker.log")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A passing run deletes its ``--basetemp`` (``make test``: ``.cache/pytest``): a whole run
    leaves 2.9 GB there (broker stores, Delta tables, checkpoints), and machines that keep one
    checkout per run fill their disk with it. A failing run keeps it for the post-mortem. By
    now every session fixture has stopped its processes."""
    basetemp = session.config.getoption("basetemp", None)
    if exitstatus == 0 and basetemp and Path(basetemp).is_dir():
        shutil.rmtree(basetemp, ignore_errors=True)


FLAVORS_ENV = "CLUSTERMQ_FLAVORS"
ALL_FLAVORS = ("classic", "artemis")


def cluster_flavors() -> list[str]:
    """The broker flavors the cluster tests run against: ``$CLUSTERMQ_FLAVORS``, else all.

    Every test that uses the ``cluster`` (or ``broker``) fixture runs once per flavor, so the
    reader, writer and pipeline suites prove the connector on both kinds of cluster.
    """
    raw = os.environ.get(FLAVORS_ENV, ",".join(ALL_FLAVORS))
    flavors = [f.strip().lower() for f in raw.split(",") if f.strip()]
    unknown = sorted(set(flavors) - set(ALL_FLAVORS))
    if unknown or not flavors:
        raise pytest.UsageError(f"{FLAVORS_ENV}={raw!r}: use a comma-separated subset of {', '.join(ALL_FLAVORS)}")
    return flavors


@pytest.fixture(scope="session", params=cluster_flavors())
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A real 3-node cluster of the parametrised flavor on dynamic loopback ports.

    Classic: a network of brokers; Artemis: a symmetric cluster. Session-scoped per flavor:
    pytest runs all tests of one flavor, then stops that cluster (by pid) before the next starts.
    """
    import time

    from clustermq.devtools.localcluster.cluster import LocalCluster

    flavor = request.param
    local = LocalCluster(tmp_path_factory.mktemp(f"cluster-{flavor}"))
    started = time.monotonic()
    try:
        local.up(nodes=3, flavor=flavor)
        print(f"\n3-node {flavor} cluster up in {time.monotonic() - started:.1f} s")
        yield local
    finally:
        local.down()


@pytest.fixture(autouse=True)
def _killed_nodes_restarted(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that used the shared cluster, restart any node it left down.

    A fault test that fails between killing a node and restarting it would otherwise leave the
    session's cluster short of a node, and every later test of that flavor fails for that
    reason alone (seen in CI: one failed Artemis node test took five writer tests with it).
    """
    yield
    if "cluster" not in request.fixturenames:
        return
    cluster = request.getfixturevalue("cluster")
    for i in range(len(cluster.nodes())):
        if not cluster.is_running(i):
            cluster.start_node(i)


class Broker:
    """Test-side helpers around the live cluster: produce, depth, reader options."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    @property
    def flavor(self) -> str:
        return self.cluster.flavor

    def destination(self, queue: str) -> str:
        """The ``destination`` header a consumer of ``queue`` sees on this flavor.

        Classic: ``/queue/<name>``; Artemis: the bare address ``<name>`` (the connector sends
        bare names with ``destination-type:ANYCAST``).
        """
        return f"/queue/{queue}" if self.flavor == "classic" else queue

    @property
    def login(self) -> dict[str, str]:
        username, password = self.cluster.credentials
        return {"username": username, "password": password}

    def connection(self, queue: str) -> ConnectionOptions:
        from clustermq.options import parse_connection_options

        return parse_connection_options({"brokers": self.cluster.brokers, "queue": queue, **self.login})

    def produce(
        self, queue: str, count: int, groups: int = 0, size: int = 200, prefix: str = "g",
        first_id: int = 0, nodes: list[int] | None = None,
    ) -> dict[str, int]:
        """Send with the plain stomp.py load generator (optionally to a subset of nodes)."""
        import dataclasses

        from clustermq.devtools.loadgen import LoadSpec, produce
        from clustermq.errors import NodeUnavailable

        conn = self.connection(queue)
        if nodes is not None:
            conn = dataclasses.replace(conn, nodes=tuple(conn.nodes[i] for i in nodes))
        spec = LoadSpec(count=count, groups=groups, size=size, group_prefix=prefix, first_id=first_id)
        try:
            return produce(conn, spec)
        except NodeUnavailable as exc:
            # A node that stops confirming COMMITs (seen once on Artemis, seconds after a node's
            # restart, with a cluster bridge to it timing out): the depths and every broker's log.
            from waits import cluster_state

            raise AssertionError(f"producing {count} messages to {queue} failed: {exc}\n"
                                 f"{cluster_state(self, queue)}") from exc

    def depths(self, queue: str, timeout: float = 30.0) -> dict[str, int | None]:
        """Depth per node; ``None`` only for a node that is down.

        A statistics request to a running node can time out on a loaded machine; counting that
        node as empty once made a fault test see more acknowledgements than there were, so a
        running node is asked again until it answers.
        """
        import time

        from clustermq.broker.depth import queue_depths

        username, password = self.cluster.credentials
        nodes = list(self.cluster.nodes())
        deadline = time.monotonic() + timeout
        while True:
            depths = queue_depths(nodes, queue, username, password)
            silent = [i for i, n in enumerate(nodes)
                      if depths.get(n.name) is None and self.cluster.is_running(i)]
            if not silent:
                return depths
            if time.monotonic() > deadline:
                raise AssertionError(f"running nodes {silent} gave no depth for {queue}: "
                                     f"{getattr(depths, 'errors', depths)}")
            time.sleep(0.2)

    def settled_depths(self, queue: str, quiet: float = 1.5, timeout: float = 60.0) -> dict[str, int | None]:
        """Depth per node once no node's depth changed for ``quiet`` seconds.

        Right after a consumer dies, Classic's network bridges move its messages between nodes
        (replayWhenNoConsumers): measured, the per-node sum read 4,829 and then 4,800 for the
        same 4,800 messages, and it can also dip below the truth while a message is in a
        bridge, so an exact count has to wait for the cluster to settle.
        """
        import time

        deadline = time.monotonic() + timeout
        last, since = self.depths(queue), time.monotonic()
        while True:
            time.sleep(0.3)
            now = self.depths(queue)
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return now
            if time.monotonic() > deadline:
                raise AssertionError(f"depths of {queue} still moving after {timeout:.0f} s: {now}")

    def wait_depth_zero(self, queue: str, timeout: float = 30.0) -> dict[str, int | None]:
        """Acks are asynchronous frames: poll until every node reports an empty queue."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            depths = self.depths(queue)
            if all(d == 0 for d in depths.values()) or time.monotonic() > deadline:
                return depths
            time.sleep(0.2)

    def restart_nodes_holding(self, queue: str) -> dict[str, int]:
        """Restart (SIGTERM, then start) every node that still counts messages of ``queue``;
        return those nodes' settled depths from before the restart.

        Artemis 2.40 can keep one delivered, unacknowledged message of a failed connection
        counted on its node and give it to no consumer (docs/broker-behaviour.md, "A message
        stranded after a killed driver"); a restart of the node returns it.
        """
        import signal

        stranded = {name: d for name, d in self.settled_depths(queue).items() if d}
        names = [n.name for n in self.cluster.nodes()]
        for name in stranded:
            self.cluster.kill_node(names.index(name), signal.SIGTERM)
            self.cluster.start_node(names.index(name))
        return stranded

    def reader_options(self, queue: str, **extra: object) -> dict[str, str]:
        opts = {"brokers": self.cluster.brokers, "queue": queue, **self.login}
        opts.update({k: str(v) for k, v in extra.items()})
        return opts


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A Spark standalone master and worker from pyspark's ``spark-class`` (spark_standalone.py),
    shared by the tests that submit applications; stopped by pid at the end of the session."""
    from spark_standalone import standalone_cluster

    with standalone_cluster(tmp_path_factory.mktemp("spark-standalone")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def broker(cluster: LocalCluster) -> Broker:
    return Broker(cluster)


@pytest.fixture
def free_port() -> int:
    """A loopback port nothing listens on (bound, then released; in the worker's port range)."""
    from clustermq.devtools.localcluster.ports import free_ports

    return free_ports(1)[0]
