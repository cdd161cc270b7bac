"""Every error the connector raises on purpose, under one base a user can catch.

Each class also derives from the built-in exception a Python user would expect for its kind
(``ValueError`` for bad input, ``ConnectionError`` for an unreachable cluster), so code written
against those keeps working. Every message names what failed (the option, the row, the node)
and what is allowed or what to do; none carries a secret.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    """The writer's input cannot become messages: a column of the wrong type or role (checked on
    the driver before any task runs; the message names the column and what is allowed), or a
    row (the message names the row's partition and index).

    Not an :class:`OptionError`: the fix is in the DataFrame, not in an option.
    """


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


class CheckpointError(ClusterMQError, ValueError):
    """A streaming checkpoint holds an offset the reader cannot read (not a count per node).

    The message names the node and the value. The checkpoint was damaged or written by another
    source; the query cannot know what was consumed, so it stops instead of guessing.
    """


# ---------------------------------------------------------------------------- the cluster
class BrokerError(ClusterMQError):
    """Something the brokers did or could not do; the message names the node."""


#: Why a node could not be connected to (:attr:`NodeUnavailable.kind`), each a different fix:
#: nothing accepts TCP connections at the address (or the network rejects them)
REFUSED = "refused"
#: the host name does not resolve
DNS = "DNS"
#: no TCP connection, TLS handshake or CONNECTED frame within ``connectTimeout``
TIMEOUT = "timeout"
#: the TLS handshake failed: certificate verification, host name, or a port that is not TLS
TLS = "TLS"
#: the broker refused the login (wrong or missing credentials)
LOGIN = "login"
UNREACHABLE_KINDS = (REFUSED, DNS, TIMEOUT, TLS, LOGIN)


class NodeUnavailable(BrokerError, ConnectionError):
    """A node could not be reached or refused the login; the message names the node.

    ``kind`` says why, as one of :data:`UNREACHABLE_KINDS` (``None`` where nothing better than
    the raw reason is known); the message reads ``broker node <node>: [<kind>] <reason>``, the
    tag first so that a list of nodes reads at a glance. ``reason`` is the part after the
    node's name (with the tag).
    """

    def __init__(self, node: _Named, reason: str, kind: str | None = None) -> None:
        self.reason = f"[{kind}] {reason}" if kind else reason
        super().__init__(f"broker node {node.name}: {self.reason}")
        self.node = node
        self.kind = kind
        self._detail = reason

    def __reduce__(self) -> tuple[type[NodeUnavailable], tuple[_Named, str, str | None]]:
        """Pickle by the constructor's arguments (the default would pass only the message)."""
        return type(self), (self.node, self._detail, self.kind)


class NoNodeReachable(BrokerError, ConnectionError):
    """Not a single node of the cluster could be reached: at the start (of the reader, a batch
    read or a write) or, while a query runs, for ``noNodeTimeout``.

    The message names every node and why it failed; ``failures`` holds each node's
    :class:`NodeUnavailable` where they are known (empty otherwise).
    """

    def __init__(self, message: str, failures: Sequence[NodeUnavailable] = ()) -> None:
        super().__init__(message)
        self.failures = tuple(failures)


class NoWritableNode(NoNodeReachable):
    """No node of the cluster accepted the task's messages; the message names every node.

    A :class:`NoNodeReachable` (each node was unreachable, refused the login, or lost its
    connection during the task), so one ``except`` covers the reader's and the writer's case.
    """


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


class BrowseRefused(BrokerError, RuntimeError):
    """A node answered a batch read's browse with an ERROR frame; the message names the node
    and quotes the broker (e.g. the login may not browse the queue)."""


class BrowseTimeout(BrokerError, TimeoutError):
    """A node's browse delivered nothing for ``browseIdleTimeout`` before its end marker; the
    message names the node, the queue and how many messages had arrived."""


# ---------------------------------------------------------------------------- the environment
class NotInstalled(ClusterMQError, FileNotFoundError):
    """A file the package needs is not there (a broker distribution, the jar cache, package data).

    The message names the file and the command that makes it, because the fix is a set-up step,
    not a code change.
    """


class DeltaJarsMissing(NotInstalled, RuntimeError):
    """Delta Lake is not on the Spark class path, or its jar cache is not filled; the message
    says which route gives it (a set-up step, hence a :class:`NotInstalled`)."""


__all__ = [
    "BrokerError",
    "BrowseIncomplete",
    "BrowseNotSupported",
    "BrowseRefused",
    "BrowseTimeout",
    "CheckpointError",
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
    "NotInstalled",
    "OptionError",
]
