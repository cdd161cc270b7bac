"""clustermq: a cluster of ActiveMQ brokers as a Spark source and sink."""

from clustermq.source import ClusterMQDataSource

__version__ = "0.1.0"
__all__ = ["ClusterMQDataSource", "__version__"]
