"""Typed columns parsed from message bodies, for the queue → Delta sink (``--parse json``).

A body that does not parse is never dropped: its row is written like any other, with the parsed
columns null and the body's text in the ``_corrupt`` column (Spark's PERMISSIVE mode with
``columnNameOfCorruptRecord``); the exact bytes stay in ``body``, and every batch report counts
them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StringType, StructField, StructType

from clustermq.errors import JobConfigError
from clustermq.pipelines.table_columns import (
    CORRUPT_COLUMN,
    OPTIONAL_READER_COLUMNS,
    PARK_REASON,
    TABLE_COLUMNS,
    WORKING_COLUMNS,
)

PARSE_FORMATS = ("json",)
_PARSED = "_clustermq_parsed"  # the parse result while a batch is processed; never written


@dataclass(frozen=True)
class BodyParse:
    """Parse every body into typed columns; keep what does not parse in ``corrupt_column``.

    ``schema`` is a Spark DDL string (``"order long, customer string"``). A body is *corrupt*
    when it is not valid UTF-8, is not a JSON object (empty, ``null``, an array, a scalar) or
    has a value that does not fit its column's type (Spark's PERMISSIVE ``from_json``); then
    every parsed column is null and ``corrupt_column`` holds the body as text (invalid UTF-8
    replaced by U+FFFD; the exact bytes are in ``body``). Fields the schema does not name are
    ignored and missing ones are null, as in Spark's JSON reader: that is not corruption.
    """

    schema: str
    format: str = "json"
    corrupt_column: str = CORRUPT_COLUMN

    def fields(self) -> StructType:
        """The parsed columns; ``JobConfigError`` (a ``ValueError``) naming the problem when the DDL is unusable.

        Needs an active SparkSession (Spark parses the DDL).
        """
        if self.format not in PARSE_FORMATS:
            raise JobConfigError(f"parse format '{self.format}' is not one of {', '.join(PARSE_FORMATS)}")
        try:
            parsed = DataType.fromDDL(self.schema)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise JobConfigError(f"schema '{self.schema}' is not a Spark DDL schema: {first}") from None
        if not isinstance(parsed, StructType) or not parsed.fields:
            raise JobConfigError(f"schema '{self.schema}' must list columns, e.g. 'order long, customer string'")
        taken = ({c.lower() for c in (*TABLE_COLUMNS, *OPTIONAL_READER_COLUMNS)}
                 | {*WORKING_COLUMNS, PARK_REASON, _PARSED, self.corrupt_column.lower()})
        clash = [f.name for f in parsed.fields if f.name.lower() in taken]
        if clash:
            raise JobConfigError(
                f"schema column(s) {', '.join(clash)} clash with the table's own columns "
                f"({', '.join(TABLE_COLUMNS)}, {self.corrupt_column}); rename them in the schema"
            )
        return parsed

    def columns(self) -> tuple[str, ...]:
        """The columns the parse adds to the table, in order."""
        return tuple(f.name for f in self.fields().fields) + (self.corrupt_column,)

    def apply(self, df: DataFrame) -> DataFrame:
        """``df`` with the parsed columns and ``corrupt_column`` added (see the class doc)."""
        fields = self.fields()
        text = F.col("body").cast("string")
        with_corrupt = StructType(fields.fields + [StructField(self.corrupt_column, StringType())])
        parsed = F.from_json(text, with_corrupt, {
            "mode": "PERMISSIVE", "columnNameOfCorruptRecord": self.corrupt_column})
        out = df.withColumn(_PARSED, parsed)
        bad = (
            F.col("body").isNull()
            | ~F.is_valid_utf8(text)
            | F.col(_PARSED).isNull()
            | F.col(_PARSED)[self.corrupt_column].isNotNull()
        )
        for f in fields.fields:
            out = out.withColumn(
                f.name, F.when(bad, F.lit(None).cast(f.dataType)).otherwise(F.col(_PARSED)[f.name]))
        out = out.withColumn(
            self.corrupt_column,
            F.when(bad, F.coalesce(F.make_valid_utf8(text), F.lit(""))).otherwise(F.lit(None).cast("string")))
        return out.drop(_PARSED)


def body_parse_from_flags(parse: str | None, schema: str | None) -> BodyParse | None:
    """The ``BodyParse`` of a job's ``--parse``/``--schema`` (``None`` without ``--parse``).

    Checked before any Spark work: a parse without a schema, a schema without a parse or an
    unknown format would otherwise show up only at the first batch. The DDL itself is parsed by
    Spark when the query starts (``start_queue_to_delta``).
    """
    parse = (parse or "").strip() or None
    schema = (schema or "").strip() or None
    if parse is None:
        if schema is not None:
            raise JobConfigError("--schema is set but --parse is not (use --parse json)")
        return None
    if parse not in PARSE_FORMATS:
        raise JobConfigError(f"--parse: '{parse}' is not one of {', '.join(PARSE_FORMATS)}")
    if schema is None:
        raise JobConfigError(
            "--parse json needs --schema '<DDL>' (or 'schema' in the config file), e.g. "
            "--schema 'order long, customer string'")
    return BodyParse(schema=schema, format=parse)
