"""Local broker clusters for development and tests (``clustermq cluster up|status|down``).

The connector's whole point is a *cluster* of brokers, so tests and demos need several real
brokers networked together on one machine, with nodes that can be killed and restarted. This
package runs the broker distribution that ``clustermq cluster fetch`` put in the cache, renders
per-node configs from the package's templates (``templates/<flavor>/``), runs one JVM per node and records everything in
``<dir>/cluster.json``.
"""

from __future__ import annotations

from clustermq.devtools.localcluster.broker_flavor import BrokerFlavor
from clustermq.devtools.localcluster.cluster import Credentials, LocalCluster
from clustermq.devtools.localcluster.clusterdir import ClusterStartError
from clustermq.devtools.localcluster.fetch import (
    ARTEMIS_VERSION,
    CLASSIC_VERSION,
    distribution_home,
    ensure_distribution,
)
from clustermq.devtools.localcluster.flavor_registry import get_flavor
from clustermq.devtools.localcluster.harness_paths import default_cluster_dir
from clustermq.paths import cache_dir

__all__ = [
    "ARTEMIS_VERSION",
    "CLASSIC_VERSION",
    "BrokerFlavor",
    "ClusterStartError",
    "Credentials",
    "LocalCluster",
    "cache_dir",
    "default_cluster_dir",
    "distribution_home",
    "ensure_distribution",
    "get_flavor",
]
