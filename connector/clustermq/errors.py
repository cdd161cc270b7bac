"""Every error the connector raises on purpose, under one base a user can catch.

Each class also derives from the built-in exception a Python user would expect for its kind
(``ValueError`` for bad input, ``ConnectionError`` for an unreachable cluster), so code written
against those keeps working. Every message names what failed (the option, the row, the node)
and what is allowed or what to do; none carries a secret.
"""

from __future__ import annotations

from typing import Protocol


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class ClusterMQError(Exception):
    """Base of every error clustermq raises on purpose."""


# ---------------------------------------------------------------------------- bad input
class OptionError(ClusterMQError, ValueError):
    """A bad option value; the message names the option and what is allowed."""


class BrowseNotSupported(OptionError):
    """A batch read asked to browse a broker that cannot browse over STOMP."""


class InputError(ClusterMQError, ValueError):
    """A row that cannot become a message; the message names the row's partition and index."""


class HeaderNotCarried(InputError):
    """A header value the cluster's brokers would change on the way (see the dialect)."""


class MessageRefused(ClusterMQError, ValueError):
    """Every node that could be tried answered one message with an ERROR frame (or was down).

    The message names the row (partition and index, and its ``clustermq_id``) and every node's
    reason: failing over cannot help a message the brokers refuse (e.g. a body over the
    broker's maximum frame size), and "no node is reachable" would send the user hunting for a
    network problem.
    """


class JobConfigError(ClusterMQError, ValueError):
    """A missing or malformed job setting; the message names the flag and the config key."""


# ---------------------------------------------------------------------------- the cluster
class BrokerError(ClusterMQError):
    """Something the brokers did or could not do; the message names the node."""


class NodeUnavailable(BrokerError, ConnectionError):
    """A node could not be reached or refused the login; the message names the node."""

    def __init__(self, node: _Named, reason: str) -> None:
        super().__init__(f"broker node {node.name}: {reason}")
        self.node = node
        self.reason = reason


class NoNodeReachable(BrokerError, ConnectionError):
    """Not a single node of the cluster could be reached for ``noNodeTimeout``."""


class NoWritableNode(BrokerError, ConnectionError):
    """No node of the cluster accepted the task's messages; the message names every node."""


class LinkLost(BrokerError):
    """A node's connection broke; its open transaction is gone (or in doubt).

    Raised and handled inside the writer (it fails over to the next node); reaches the user only
    inside a :class:`NoWritableNode`.
    """


class DepthError(BrokerError, RuntimeError):
    """A node could not report a depth (unreachable, login refused, no answer)."""


class MoveError(BrokerError, RuntimeError):
    """Staged messages could not be moved into the queue; the message names node and counts."""


class BrowseIncomplete(BrokerError, RuntimeError):
    """The broker returned fewer messages than its queue holds (Classic's browse limits)."""


# ---------------------------------------------------------------------------- the environment
class DeltaJarsMissing(ClusterMQError, RuntimeError):
    """Delta Lake is not on the Spark class path; the message says which route gives it."""


__all__ = [
    "BrokerError",
    "BrowseIncomplete",
    "BrowseNotSupported",
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
]
