"""Spark auto-registers top-level ``pyspark_*`` modules that expose ``DefaultSource``."""

from clustermq.source import ClusterMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
