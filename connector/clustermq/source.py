"""The ``clustermq`` data source: Spark's entry point, options parsed here once."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from clustermq.errors import OptionError
from clustermq.options import ReadOptions, WriteOptions
from clustermq.options.table import MODE
from clustermq.read.schema import read_schema_ddl


class ClusterMQDataSource(DataSource):
    """``format("clustermq")``: a cluster of ActiveMQ brokers as a Spark source and sink."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)

    def __repr__(self) -> str:
        return "ClusterMQDataSource()"

    @classmethod
    def name(cls) -> str:
        return "clustermq"

    def schema(self) -> str:
        # Spark asks for the schema only when a read is defined (``load()``): validating the
        # read options here makes a bad option fail there, before any message is consumed.
        return read_schema_ddl(ReadOptions.parse(self.options).include_delivery_count)

    def reader(self, schema: StructType) -> DataSourceReader:
        """Batch read: a browse snapshot of every node (option ``mode``, default ``browse``)."""
        from clustermq.read.browse import ClusterMQBatchReader

        return ClusterMQBatchReader(ReadOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from clustermq.read.stream import ClusterMQStreamReader

        if any(k.lower() == MODE.key for k in self.options):
            raise OptionError(
                f"option '{MODE.name}' applies to batch reads (spark.read); a streaming read always "
                "consumes, acknowledging on commit"
            )
        return ClusterMQStreamReader(ReadOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """Batch write; options and input columns are checked here, before any task runs."""
        from clustermq.write.layout import input_layout
        from clustermq.write.spark import ClusterMQBatchWriter, discovered

        if overwrite:
            raise OptionError(
                "save mode 'overwrite' is not supported: a queue cannot be truncated; "
                "use .mode(\"append\")"
            )
        options = discovered(WriteOptions.parse(self.options))
        return ClusterMQBatchWriter(options, input_layout(schema, options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Streaming write (every output mode appends the batch's rows as messages)."""
        from clustermq.write.layout import input_layout
        from clustermq.write.spark import ClusterMQStreamWriter

        # with discovery=cluster the writer asks for the nodes before every micro-batch
        options = WriteOptions.parse(self.options)
        return ClusterMQStreamWriter(options, input_layout(schema, options))

