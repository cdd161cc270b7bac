"""clustermq: a cluster of ActiveMQ brokers as a Spark source and sink.

Every error the connector raises on purpose derives from :class:`ClusterMQError`; the classes
are exported here so user code can catch them without knowing the module layout.
"""

from clustermq.errors import (
    BrokerError,
    BrowseIncomplete,
    BrowseNotSupported,
    ClusterMQError,
    DeltaJarsMissing,
    DepthError,
    HeaderNotCarried,
    InputError,
    JobConfigError,
    LinkLost,
    MessageRefused,
    MoveError,
    NodeUnavailable,
    NoNodeReachable,
    NoWritableNode,
    OptionError,
)
from clustermq.source import ClusterMQDataSource

__version__ = "0.1.0"
__all__ = [
    "BrokerError",
    "BrowseIncomplete",
    "BrowseNotSupported",
    "ClusterMQDataSource",
    "ClusterMQError",
    "DeltaJarsMissing",
    "DepthError",
    "HeaderNotCarried",
    "InputError",
    "JobConfigError",
    "LinkLost",
    "MessageRefused",
    "MoveError",
    "NoNodeReachable",
    "NoWritableNode",
    "NodeUnavailable",
    "OptionError",
    "__version__",
]
