"""The ``clustermq`` command line: local cluster, queue depth, load generator, demo, bench.

``clustermq cluster fetch`` downloads the broker distributions the local cluster runs (the
harness's one download; everything else only reads the cache), so a pip-installed package needs
nothing of the repository.
"""

from __future__ import annotations

import argparse
import sys

from clustermq.broker.connection_options import ConnectionOptions
from clustermq.devtools import demo
from clustermq.devtools.arguments import positive_number
from clustermq.devtools.loadgen import LoadSpec, print_progress, produce
from clustermq.devtools.localcluster.commands import add_cluster_parsers, brokers_for, credentials_for
from clustermq.devtools.localcluster.fetch import main as fetch_main
from clustermq.errors import ClusterMQError
from clustermq.options import OptionError, parse_connection_options


def _connection_from_args(args: argparse.Namespace) -> ConnectionOptions:
    username, password = credentials_for(args)
    raw = {"brokers": args.brokers or "", "queue": args.queue}
    if username:
        raw["username"] = username
    if password:
        raw["password"] = password
    if getattr(args, "flavor", None):
        raw["flavor"] = args.flavor
    return parse_connection_options(raw)


def cmd_produce(args: argparse.Namespace) -> int:
    if not args.brokers:
        args.brokers = brokers_for(args)
    options = _connection_from_args(args)
    spec = LoadSpec(count=args.count, groups=args.groups, size=args.size,
                    persistent=not args.non_persistent, rate=args.rate)
    per_node = produce(options, spec, progress=print_progress)
    for node, count in per_node.items():
        print(f"{node}\t{count}")
    print(f"total\t{sum(per_node.values())}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clustermq", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_cluster_parsers(sub)

    produce_cmd = sub.add_parser("produce", help="send test messages with a plain stomp.py producer")
    produce_cmd.add_argument("--brokers", help="node list (default: the local cluster in --dir)")
    produce_cmd.add_argument("--queue", required=True)
    produce_cmd.add_argument("--count", type=int, default=10000)
    produce_cmd.add_argument("--groups", type=int, default=0, help="number of group ids (0: none)")
    produce_cmd.add_argument("--size", type=int, default=256, help="body size in bytes")
    produce_cmd.add_argument("--non-persistent", action="store_true")
    produce_cmd.add_argument("--rate", type=positive_number("--rate", "messages per second"), default=None,
                             help="messages per second over all nodes, each stamped with "
                                  "loadgen_sent_ms (default: as fast as the brokers take them)")
    produce_cmd.add_argument("--flavor", choices=["auto", "classic", "artemis"], default="auto")
    produce_cmd.add_argument("--username")
    produce_cmd.add_argument("--password")
    produce_cmd.add_argument("--dir", help="local cluster directory (credentials come from it)")
    produce_cmd.set_defaults(func=cmd_produce)

    demo_cmd = sub.add_parser("demo", help="start a local cluster, produce, stream through Spark, report")
    demo.add_arguments(demo_cmd)
    demo_cmd.set_defaults(func=demo.run_demo)

    bench_cmd = sub.add_parser("bench", add_help=False,
                               help="benchmarks against the raw stomp.py client (see --help)")
    bench_cmd.set_defaults(func=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # its own parser: python -m clustermq.devtools.bench.run takes the same flags
        # imported here: the bench is development tooling (Spark, plots), never loaded by the
        # other commands
        from clustermq.devtools.bench.run import main as bench_main

        return bench_main(argv[1:])
    if argv[:2] == ["cluster", "fetch"]:  # its own parser, in localcluster.fetch
        return fetch_main(argv[2:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ClusterMQError, OptionError, ConnectionError, TimeoutError, RuntimeError) as exc:
        print(f"clustermq: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
