"""The ``clustermq cluster ...`` and ``clustermq depth`` sub-commands.

``cli.py`` owns the top-level parser; it calls :func:`add_cluster_parsers` with its
sub-parsers object and dispatches to ``args.func(args)``. Every ``cmd_*`` function returns a
process exit code and prints errors itself, so the CLI needs no knowledge of this package.
:func:`credentials_for` and :func:`brokers_for` let other sub-commands default to the local
cluster the same way ``depth`` does.

``cluster up`` prints progress lines and, as its last line of stdout, the ``brokers`` option
string, so scripts can do ``BROKERS=$(clustermq cluster up | tail -1)``.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from clustermq.broker.depth import format_depth_table, queue_depths
from clustermq.broker.nodes import Node
from clustermq.devtools.localcluster.cluster import LocalCluster
from clustermq.devtools.localcluster.failover_pairs import is_paired
from clustermq.devtools.localcluster.harness_paths import default_cluster_dir
from clustermq.options import parse_connection_options


def _cluster(args: argparse.Namespace) -> LocalCluster:
    return LocalCluster(Path(args.dir) if getattr(args, "dir", None) else default_cluster_dir())


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def _say(message: str) -> None:
    print(message, flush=True)


#: what a command on one node reports as one line instead of a traceback: no cluster in the
#: directory, a node index out of range, a node that did not start or stop
_NODE_FAILURES: tuple[type[Exception], ...] = (FileNotFoundError, IndexError, RuntimeError)


def _command(
    *reported: type[Exception],
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Report the failures a command expects (``reported``) as one line on stderr and exit 1;
    anything else is a bug and keeps its traceback."""
    def wrap(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        @functools.wraps(func)
        def run(args: argparse.Namespace) -> int:
            try:
                return func(args)
            except reported as exc:
                return _error(str(exc))
        return run
    return wrap


@_command(ValueError, RuntimeError, OSError)
def cmd_up(args: argparse.Namespace) -> int:
    """Start a fresh cluster; last stdout line is the brokers string."""
    cluster = _cluster(args)
    cluster.up(
        nodes=args.nodes,
        flavor=args.flavor,
        base_port=args.base_port,
        timeout=args.timeout,
        progress=_say,
        tls=args.tls,
        scale_down=args.scale_down,
        backups=args.backups,
    )
    print(f"cluster directory: {cluster.dir}")
    if cluster.ca_file:
        print(f"CA certificate (option sslCaFile): {cluster.ca_file}")
    print(cluster.brokers, flush=True)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Table of nodes; exit 0 only when every node runs and accepts logins."""
    cluster = _cluster(args)
    if not cluster.exists:
        return _error(f"no local cluster in {cluster.dir}")
    rows = cluster.status()
    print(f"cluster {cluster.dir} ({cluster.flavor}); brokers={cluster.brokers}")
    print(f"amqpBrokers={cluster.amqp_brokers} (reader option transport=amqp)")
    if cluster.ca_file:
        print(f"CA certificate (option sslCaFile): {cluster.ca_file}")
    paired = any(row["pair"] != row["index"] for row in rows)
    role_head = f" {'pair':>4} {'role':<8}" if paired else ""
    print(f"{'node':<6} {'name':<8} {'stomp':<22} {'peer':>6} {'amqp':>6} {'pid':>8}{role_head}  state")
    for row in rows:
        state = "ready" if row["ready"] else ("running, " + row["detail"] if row["running"] else "down")
        pid = row["pid"] if row["pid"] is not None else "-"
        role = f" {row['pair']:>4} {row['role']:<8}" if paired else ""
        print(f"{row['index']:<6} {row['name']:<8} {row['stomp']:<22} {row['peer_port']:>6} {row['amqp_port']:>6} {pid:>8}{role}  {state}")
    if paired:  # a pair is healthy when one member is live and the others wait as standby
        pairs = {row["pair"] for row in rows}
        live = {row["pair"] for row in rows if row["role"] == "live"}
        return 0 if live == pairs and all(row["running"] for row in rows) else 1
    return 0 if all(row["ready"] for row in rows) else 1


@_command(RuntimeError)
def cmd_down(args: argparse.Namespace) -> int:
    """Stop every node of the cluster (idempotent)."""
    cluster = _cluster(args)
    if not cluster.exists:
        print(f"no local cluster in {cluster.dir}; nothing to stop")
        return 0
    cluster.down()
    print(f"cluster in {cluster.dir} stopped")
    return 0


@_command(*_NODE_FAILURES)
def cmd_kill(args: argparse.Namespace) -> int:
    """Kill one node (SIGKILL by default: a crash, not a shutdown)."""
    cluster = _cluster(args)
    try:
        sig = signal.Signals["SIG" + args.signal.upper().removeprefix("SIG")]
    except KeyError:
        return _error(f"unknown signal '{args.signal}'")
    if _paired(cluster):  # NODE_INDEX names the pair; its live member gets the signal
        member = cluster.live_member(args.node_index)
        if member is None:
            return _error(f"node {args.node_index} has no live member")
        cluster.kill_node(member, sig=sig)
        print(f"node {args.node_index}: live member {member} sent {sig.name}")
        return 0
    cluster.kill_node(args.node_index, sig=sig)
    print(f"node {args.node_index} sent {sig.name}")
    return 0


@_command(*_NODE_FAILURES)
def cmd_start(args: argparse.Namespace) -> int:
    """Restart a killed node with its ports and data."""
    cluster = _cluster(args)
    if _paired(cluster):  # NODE_INDEX names the pair; its stopped member comes back as standby
        member = cluster.start_standby(args.node_index, timeout=args.timeout, progress=_say)
        print(f"node {args.node_index}: member {member} back")
        return 0
    seconds = cluster.start_node(args.node_index, timeout=args.timeout, progress=_say)
    print(f"node {args.node_index} back in {seconds:.1f} s")
    return 0


@_command(*_NODE_FAILURES, ValueError)
def cmd_add(args: argparse.Namespace) -> int:
    """Start one more node that joins the running cluster; last stdout line: its endpoint."""
    cluster = _cluster(args)
    node = cluster.add_node(timeout=args.timeout, progress=_say)
    print(cluster.brokers)
    print(node.name, flush=True)
    return 0


@_command(*_NODE_FAILURES)
def cmd_stop(args: argparse.Namespace) -> int:
    """Stop one node gracefully (SIGTERM; an Artemis node scales down to its peers)."""
    cluster = _cluster(args)
    cluster.stop_node(args.node_index)
    print(f"node {args.node_index} stopped")
    return 0


def _paired(cluster: LocalCluster) -> bool:
    return cluster.exists and is_paired(cluster.state())


def credentials_for(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """``--username``/``--password`` when given, else the local cluster's (``--dir`` or default).

    ``(None, None)`` when neither is available (brokers without authentication).
    """
    username = getattr(args, "username", None)
    password = getattr(args, "password", None)
    if username is None or password is None:
        cluster = _cluster(args)
        if cluster.exists:
            creds = cluster.credentials
            username = creds.username if username is None else username
            password = creds.password if password is None else password
    return username, password


def brokers_for(args: argparse.Namespace) -> str:
    """``--brokers`` when given, else the local cluster's; ``RuntimeError`` when neither exists."""
    brokers = getattr(args, "brokers", None)
    if brokers:
        return brokers
    cluster = _cluster(args)
    if not cluster.exists:
        raise RuntimeError(
            f"--brokers not given and no local cluster in {cluster.dir} to take it from "
            "(start one with 'clustermq cluster up' or pass --dir)"
        )
    return cluster.brokers


def nodes_for(args: argparse.Namespace) -> tuple[Node, ...]:
    """The nodes of ``--brokers`` (TLS settings from ``--ssl-ca-file``), else the local cluster's.

    The local cluster's nodes carry its CA, so ``depth --dir`` works on a TLS cluster as is.
    """
    brokers = brokers_for(args)
    if not getattr(args, "brokers", None):
        return _cluster(args).nodes()
    raw = {"brokers": brokers, "queue": "unused"}
    if getattr(args, "ssl_ca_file", None):
        raw["sslcafile"] = args.ssl_ca_file
    return parse_connection_options(raw).nodes


@_command(ValueError, RuntimeError)
def cmd_depth(args: argparse.Namespace) -> int:
    """Per-node depth of a queue and the total; exit 1 if some node did not answer."""
    username, password = credentials_for(args)
    nodes = nodes_for(args)
    depths = queue_depths(nodes, args.queue, username, password, timeout=args.timeout)
    print(format_depth_table(depths))
    return 0 if depths.complete else 1


def add_cluster_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``cluster {up,status,down,kill,start,add,stop}`` and ``depth`` on ``subparsers``."""
    default_dir = default_cluster_dir()
    dir_help = f"cluster directory (default: {default_dir})"

    cluster = subparsers.add_parser("cluster", help="run a local broker cluster for development and tests")
    actions = cluster.add_subparsers(dest="cluster_command", metavar="{fetch,up,status,down,kill,start,add,stop}")
    actions.required = True

    actions.add_parser("fetch", add_help=False, help="download the broker distributions (Maven) into the cache")
    up = actions.add_parser("up", help="start a fresh local cluster; prints the brokers string last")
    up.add_argument("--nodes", type=int, default=3, help="number of broker nodes (default: 3)")
    up.add_argument("--flavor", choices=["classic", "artemis"], default="classic",
                    help="broker product (default: classic)")
    up.add_argument("--dir", help=dir_help)
    up.add_argument("--base-port", type=int, default=None,
                    help="node i uses STOMP port P+10*i and peer port P+10*i+1 (default: free ports)")
    up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for the cluster (default: 90)")
    up.add_argument("--backups", type=int, default=0,
                    help="standby members per node: each node a master/slave (Classic, shared KahaDB) "
                         "or primary/backup (Artemis, shared store) pair; brokers lists masterslave:(...) groups")
    up.add_argument("--tls", action="store_true",
                    help="STOMP over TLS only: generate a CA and broker certificate (keytool) in DIR/tls; "
                         "nodes are stomp+ssl://, clients pass the printed CA file as sslCaFile")
    up.add_argument("--scale-down", action="store_true",
                    help="Artemis: a node stopped gracefully ('cluster stop') moves its messages to a peer")
    up.set_defaults(func=cmd_up)

    status = actions.add_parser("status", help="show the nodes of the local cluster")
    status.add_argument("--dir", help=dir_help)
    status.set_defaults(func=cmd_status)

    down = actions.add_parser("down", help="stop every node of the local cluster")
    down.add_argument("--dir", help=dir_help)
    down.set_defaults(func=cmd_down)

    kill = actions.add_parser("kill", help="kill one node, or a pair's live member (simulates a crash)")
    kill.add_argument("node_index", metavar="NODE_INDEX", type=int)
    kill.add_argument("--dir", help=dir_help)
    kill.add_argument("--signal", default="KILL", help="signal name (default: KILL; TERM for a clean stop)")
    kill.set_defaults(func=cmd_kill)

    start = actions.add_parser("start", help="restart a killed node (a pair's member comes back as standby)")
    start.add_argument("node_index", metavar="NODE_INDEX", type=int)
    start.add_argument("--dir", help=dir_help)
    start.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for the node (default: 90)")
    start.set_defaults(func=cmd_start)

    add = actions.add_parser("add", help="start one more node that joins the running cluster")
    add.add_argument("--dir", help=dir_help)
    add.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for the node (default: 90)")
    add.set_defaults(func=cmd_add)

    stop = actions.add_parser("stop", help="stop one node gracefully (SIGTERM)")
    stop.add_argument("node_index", metavar="NODE_INDEX", type=int)
    stop.add_argument("--dir", help=dir_help)
    stop.set_defaults(func=cmd_stop)

    depth = subparsers.add_parser("depth", help="queue depth on every node of a cluster, and the total")
    depth.add_argument("--brokers", help="comma-separated host:port list (default: the local cluster's)")
    depth.add_argument("--queue", required=True, help="queue name, e.g. orders or /queue/orders")
    depth.add_argument("--username", help="login (default: the local cluster's)")
    depth.add_argument("--password", help="passcode (default: the local cluster's)")
    depth.add_argument("--dir", help=f"take brokers/credentials from this local cluster ({dir_help})")
    depth.add_argument("--ssl-ca-file", help="CA (PEM) for stomp+ssl:// brokers given with --brokers")
    depth.add_argument("--timeout", type=float, default=10.0, help="seconds per node (default: 10)")
    depth.set_defaults(func=cmd_depth)


def main(argv: list[str] | None = None) -> int:
    """``python -m clustermq.devtools.localcluster.commands``: the cluster commands alone."""
    parser = argparse.ArgumentParser(prog="clustermq")
    sub = parser.add_subparsers(dest="command")
    sub.required = True
    add_cluster_parsers(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
