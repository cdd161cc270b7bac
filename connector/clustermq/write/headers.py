"""The headers the writer adds to every message, and the staging queues' names.

One module both halves of the writer (the tasks that stage, the driver that moves) and the
publisher read, so a header's name is written once.
"""

from __future__ import annotations

from clustermq.broker.queue_names import STAGING_PREFIX

#: deterministic message id: ``<job>:<batch>:<partition>:<row>``
ID_HEADER = "clustermq_id"
#: the job (batch write) or streaming query the message was written by
JOB_HEADER = "clustermq_job"
#: staging only: the task attempt that staged the message
TASK_HEADER = "clustermq_task"
#: staging only: the queue the message is for (the row's ``destination`` or option ``queue``)
TARGET_HEADER = "clustermq_target"
#: prefix of every header the connector owns; rows may not set such headers themselves
CLUSTERMQ_PREFIX = "clustermq_"


def staging_queue(queue: str, job_id: str, node_index: int, attempt: str | None = None) -> str:
    """The staging queue of a job on one node; with ``attempt`` (a task attempt's tag) that
    attempt's own one, where the commit moves inside the broker (write/broker_move.py)."""
    prefix = staging_prefix(queue, job_id)
    return f"{prefix}{attempt}.n{node_index}" if attempt else f"{prefix}n{node_index}"


def staging_prefix(queue: str, job_id: str) -> str:
    """What the names of every staging queue of a job start with."""
    return f"{STAGING_PREFIX}.{queue}.{job_id}."
