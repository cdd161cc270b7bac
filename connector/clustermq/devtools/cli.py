"""The ``clustermq`` command line: local cluster, queue depth, load generator, demo."""

from __future__ import annotations

import argparse
import sys

from clustermq.options import OptionError, parse_connection_options


def _connection_from_args(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from clustermq.devtools.localcluster.commands import credentials_for

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
    from clustermq.devtools.loadgen import LoadSpec, print_progress, produce

    if not args.brokers:
        from clustermq.devtools.localcluster.commands import brokers_for

        args.brokers = brokers_for(args)
    options = _connection_from_args(args)
    spec = LoadSpec(count=args.count, groups=args.groups, size=args.size,
                    persistent=not args.non_persistent)
    per_node = produce(options, spec, progress=print_progress)
    for node, count in per_node.items():
        print(f"{node}\t{count}")
    print(f"total\t{sum(per_node.values())}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from clustermq.devtools.demo import run_demo

    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    from clustermq.devtools.localcluster.commands import add_cluster_parsers

    parser = argparse.ArgumentParser(prog="clustermq", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_cluster_parsers(sub)

    produce = sub.add_parser("produce", help="send test messages with a plain stomp.py producer")
    produce.add_argument("--brokers", help="node list (default: the local cluster in --dir)")
    produce.add_argument("--queue", required=True)
    produce.add_argument("--count", type=int, default=10000)
    produce.add_argument("--groups", type=int, default=0, help="number of group ids (0: none)")
    produce.add_argument("--size", type=int, default=256, help="body size in bytes")
    produce.add_argument("--non-persistent", action="store_true")
    produce.add_argument("--flavor", choices=["auto", "classic", "artemis"], default="auto")
    produce.add_argument("--username")
    produce.add_argument("--password")
    produce.add_argument("--dir", help="local cluster directory (credentials come from it)")
    produce.set_defaults(func=cmd_produce)

    demo = sub.add_parser("demo", help="start a local cluster, produce, stream through Spark, report")
    demo.add_argument("--nodes", type=int, default=3)
    demo.add_argument("--count", type=int, default=20000)
    demo.add_argument("--groups", type=int, default=100)
    demo.add_argument("--max-messages-per-trigger", type=int, default=3000)
    demo.add_argument("--dir", help="cluster directory (default: a fresh temporary one)")
    demo.add_argument("--keep", action="store_true", help="leave the cluster running")
    demo.set_defaults(func=cmd_demo)

    bench = sub.add_parser("bench", add_help=False,
                           help="benchmarks against the raw stomp.py client (see --help)")
    bench.set_defaults(func=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # its own parser: python -m clustermq.devtools.bench.run takes the same flags
        from clustermq.devtools.bench.run import main as bench_main

        return bench_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (OptionError, ConnectionError, TimeoutError, RuntimeError) as exc:
        print(f"clustermq: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
