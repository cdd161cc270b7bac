"""clustermq: a cluster of ActiveMQ brokers as a Spark source and sink.

Every error the connector raises on purpose derives from :class:`ClusterMQError`; the classes
are exported here so user code can catch them without knowing the module layout.
"""

from clustermq import errors
from clustermq.errors import *  # noqa: F403 - every error class, listed once in errors.__all__
from clustermq.source import ClusterMQDataSource
from clustermq.version import __version__

__all__ = ["ClusterMQDataSource", "__version__", *errors.__all__]
