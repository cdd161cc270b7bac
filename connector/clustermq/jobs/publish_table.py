"""Publish a Delta table or a Parquet folder to a queue or a topic through the clustermq writer.

    python -m clustermq.jobs.publish_table --brokers H:P,H:P (--queue orders | --topic T) \\
        --input /lake/orders [--format delta|parquet] \\
        (--body-col COL | --body-json) [--group-col COL] [--headers-col COL] \\
        [--header NAME=COL ...] [--priority-col COL] [--where SQL] [--option KEY=VALUE ...]

    spark-submit [--packages io.delta:delta-spark_4.2_2.13:4.4.0] spark_jobs/publish_table.py ...

Column mapping: ``--body-col`` names the column sent as the message body (string or binary),
or ``--body-json`` sends each whole row as a JSON object. ``--group-col`` becomes the message
group (rows of a group go to one node, in order within a Spark partition); ``--headers-col``
names a ``map<string,string>`` column whose entries become headers; each ``--header NAME=COL``
sends column COL (as text) in header NAME; ``--priority-col`` the JMS priority (0-9).
``--format delta`` (default) needs Delta Lake on the class path; ``--format parquet`` does not.

The write is one batch job with the writer's guarantee: nothing reaches the queue unless every
task succeeded, then every row does (see the README's "Writing"). Credentials come only from
``CLUSTERMQ_USERNAME`` / ``CLUSTERMQ_PASSWORD``. A failure prints one line
``publish_table: error: <cause>`` and exits 2 (a bad setting) or 1 (at run time);
``CLUSTERMQ_LOG_LEVEL=DEBUG`` adds the traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pyspark.sql import functions as F

from clustermq.errors import JobConfigError
from clustermq.jobs.runner import job_parser, run_spark_job, session_for_format
from clustermq.pipelines.job_config import credentials_from_env, job_source, parse_key_values, source_label

NAME = "publish_table"
FORMATS = ("delta", "parquet")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = job_parser(NAME, __doc__, reading=False)
    p.add_argument("--input", required=True, help="Delta table or Parquet folder")
    p.add_argument("--format", choices=FORMATS, default="delta")
    body = p.add_mutually_exclusive_group(required=True)
    body.add_argument("--body-col", help="column sent as the message body (string or binary)")
    body.add_argument("--body-json", action="store_true", help="send every row as a JSON object")
    p.add_argument("--group-col", help="column that becomes the message group id")
    p.add_argument("--headers-col", help="map<string,string> column whose entries become headers")
    p.add_argument("--header", action="append", default=[], metavar="NAME=COL",
                   help="send column COL (as text) in header NAME (repeatable)")
    p.add_argument("--priority-col", help="column with the JMS priority (0-9)")
    p.add_argument("--where", help="SQL filter on the input rows")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="any further clustermq writer option (repeatable; not username/password)")
    args = p.parse_args(argv)
    args.headers = parse_key_values(args.header, "--header", options=False)
    args.writer_options = parse_key_values(args.option, "--option")
    args.source = job_source(args)
    return args


def map_columns(df: Any, args: argparse.Namespace) -> Any:
    """The input rows as the writer's columns: body, group_id, headers, priority."""
    missing = [c for c in (args.body_col, args.group_col, args.headers_col, args.priority_col,
                           *args.headers.values()) if c and c not in df.columns]
    if missing:
        raise JobConfigError(
            f"column(s) {', '.join(missing)} not in the input {args.input}; it has: "
            f"{', '.join(df.columns)}"
        )
    if args.body_json:
        body = F.to_json(F.struct(*[F.col(c) for c in df.columns]))
    else:
        body = F.col(args.body_col)
    columns = [body.alias("body")]
    if args.group_col:
        columns.append(F.col(args.group_col).cast("string").alias("group_id"))
    maps = []
    if args.headers_col:
        maps.append(F.col(args.headers_col))
    if args.headers:
        pairs = []
        for name, column in args.headers.items():
            pairs += [F.lit(name), F.col(column).cast("string")]
        maps.append(F.create_map(*pairs))
    if maps:
        columns.append((maps[0] if len(maps) == 1 else F.map_concat(*maps)).alias("headers"))
    if args.priority_col:
        columns.append(F.col(args.priority_col).cast("int").alias("priority"))
    return df.select(*columns)


def run(spark: Any, args: argparse.Namespace) -> int:
    """Publish; return the number of rows sent (the tests call this in-process)."""
    df = spark.read.format(args.format).load(args.input)
    if args.where:
        df = df.where(args.where)
    rows = map_columns(df, args)
    count = rows.count()
    print(f"publishing {count} rows of {args.input} to {source_label(args.source)}", flush=True)
    (rows.write.format("clustermq").mode("append")
     .option("brokers", args.brokers).options(**args.source)
     .options(**args.writer_options).options(**credentials_from_env())
     .save())
    print(f"published {count} messages to {source_label(args.source)}", flush=True)
    return count


def main(argv: list[str] | None = None) -> int:
    """The job: flags (``argv``, default ``sys.argv[1:]``) to exit code; see the module docstring."""
    return run_spark_job(NAME, argv, parse_args,
                         lambda args: session_for_format("clustermq-publish-table", args.format), run)


if __name__ == "__main__":
    sys.exit(main())
