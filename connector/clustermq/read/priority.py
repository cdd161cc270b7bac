"""Priority backup for the reader (``priorityNodes``): consume from the preferred nodes, and from
the others only while no preferred node is connected.

Why pausing instead of dropping a node: a paused node's subscription keeps its offset in the
checkpoint (it simply stops moving) and keeps its connection until every message Spark planned
from it is acknowledged, so what it already delivered is emitted and acknowledged like any other
batch; only then is the connection closed, and the messages it held unplanned go back to the
broker, whose network forwards them to the preferred nodes' consumers. Decided on the caller's
thread at each ``latestOffset`` (``follow_priority``), where planning and acknowledgement happen,
so no batch can be planned from a node between the check and the close.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from clustermq.broker.nodes import Node
from clustermq.options import ReadOptions
from clustermq.read.messages import NodeStatus
from clustermq.read.subscription import NodeSubscription

log = logging.getLogger("clustermq.priority")


class BackupSubscription(NodeSubscription):
    """A node outside ``priorityNodes``: read only while no preferred node is connected."""

    paused = True  # until the reader finds no preferred node (connect_order, follow_priority)

    def available(self, start: int, cap_arrival: int | None = None) -> list[int]:
        return [] if self.paused else super().available(start, cap_arrival)

    def pause(self, preferred: Sequence[str]) -> None:
        """Plan nothing more from this node; close its connection once nothing planned from it
        waits for acknowledgement (the next ``latestOffset`` after its last batch commits)."""
        if not self.paused:
            self.paused = True
            log.warning("priority backup: preferred node(s) %s reachable; node %s paused (its "
                        "planned messages are acknowledged first)", ", ".join(preferred), self.node.name)
        self.close_if_settled("paused for a preferred node")

    def resume(self) -> None:
        """Read from this node again: no preferred node is connected."""
        if self.paused:
            self.paused = False
            log.warning("priority backup: no preferred node reachable; reading from node %s",
                        self.node.name)

    def status(self) -> NodeStatus:
        status = super().status()
        status.paused = self.paused
        return status


def subscription_class(options: ReadOptions, node: Node) -> type[NodeSubscription]:
    """Backups are the nodes outside a non-empty ``priorityNodes``."""
    backup = options.priority_nodes and node.name not in options.priority_nodes
    return BackupSubscription if backup else NodeSubscription


def connect_order(subs: Sequence[NodeSubscription]) -> Iterator[Sequence[NodeSubscription]]:
    """The waves of the reader's first connection: the preferred nodes, then the backups only
    if no preferred node answered (the others stay paused, never connected)."""
    preferred = [s for s in subs if not isinstance(s, BackupSubscription)]
    backups = [s for s in subs if isinstance(s, BackupSubscription)]
    if preferred:
        yield preferred
    if backups and not any(s.connected for s in preferred):
        for sub in backups:
            sub.resume()
        yield backups


def follow_priority(subs: Sequence[NodeSubscription]) -> None:
    """Pause the backups while a preferred node is connected, resume them while none is."""
    backups = [s for s in subs if isinstance(s, BackupSubscription)]
    up = [s.node.name for s in subs if s.connected and not isinstance(s, BackupSubscription)]
    for sub in backups:
        if up:
            sub.pause(up)
        else:
            sub.resume()
