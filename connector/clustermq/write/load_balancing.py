"""Which broker node a writer task sends to: the load-balancing policies and the failover order.

The policies are named as in the Artemis client's connection load-balancing policies, adapted to
Spark, where the unit that opens connections is a task and tasks share no counter:

* ``roundRobin`` - task ``i`` of a job goes to node ``(start + i) mod n``; ``start`` is a hash
  of the job (and micro-batch), so n consecutive tasks cover every node and small jobs do not
  all pile onto the first node.
* ``random`` - every task attempt draws a node.
* ``randomSticky`` - one node per job (per query for a stream), drawn by hashing the job id:
  random across jobs, the same for every task and batch of one job.
* ``firstElement`` - the first node of ``brokers``; the others are only failover targets.

Rows with a group id ignore the policy: they go to ``bucket_for_group(group, n)``, the same hash
the load generator uses, so a group never splits across nodes while its node is reachable
(ActiveMQ message groups are per broker).

When the chosen node is unreachable the rows go to the next node of the list (wrapping around).
This order is a pure function of the chosen node, so all rows of a group that fail over land
together on the same next node.
"""

from __future__ import annotations

import random

from clustermq.errors import OptionError
from clustermq.groups import bucket_for_group, group_hash
from clustermq.options import LOAD_BALANCING_POLICIES


def task_node(policy: str, nodes: int, job_key: str, partition: int) -> int:
    """The node index a task sends its rows without a group id to (before failover)."""
    if nodes < 1:
        raise OptionError(f"option 'brokers': no node to write to (got {nodes})")
    if policy == "roundRobin":
        return (group_hash(job_key) + partition) % nodes
    if policy == "random":
        return random.SystemRandom().randrange(nodes)
    if policy == "randomSticky":
        return group_hash(job_key.split("#", 1)[0]) % nodes
    if policy == "firstElement":
        return 0
    raise OptionError(
        f"unknown load-balancing policy '{policy}'; allowed: {', '.join(LOAD_BALANCING_POLICIES)}"
    )


def group_node(group_id: str, nodes: int) -> int:
    """The node index every row of ``group_id`` goes to (before failover)."""
    if nodes < 1:
        raise OptionError(f"option 'brokers': no node to write to (got {nodes})")
    return bucket_for_group(group_id, nodes)


def failover_order(preferred: int, nodes: int, priority: tuple[int, ...] = ()) -> list[int]:
    """``preferred`` first, then the following nodes of the list, wrapping around.

    With ``priority`` (``priorityNodes``): the preferred nodes first, from ``preferred`` on,
    then the others in the same wrapping order, so the others only take what no preferred node
    can (priority backup).
    """
    order = [(preferred + k) % nodes for k in range(nodes)]
    if not priority:
        return order
    return [i for i in order if i in priority] + [i for i in order if i not in priority]


def among(priority: tuple[int, ...], nodes: int) -> tuple[int, ...]:
    """The node indices a policy or group hash chooses from: the preferred ones, else all."""
    return priority or tuple(range(nodes))


def job_key(job_id: str, batch_id: int) -> str:
    """The key the policies hash: ``randomSticky`` uses the part before ``#`` (the job alone),
    ``roundRobin`` the whole key, so a stream's start node rotates from batch to batch."""
    return f"{job_id}#{batch_id}"
