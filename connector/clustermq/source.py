"""The ``clustermq`` data source: Spark's entry point, options parsed here once."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from .options import ReadOptions
from .schema import READ_SCHEMA_DDL


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
        ReadOptions.parse(self.options)
        return READ_SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import ClusterMQStreamReader

        return ClusterMQStreamReader(ReadOptions.parse(self.options))
