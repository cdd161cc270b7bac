"""The one rule for queue names: what every broker flavor takes for exactly one plain queue.

Applied before anything is consumed or sent (option ``queue``, the writer's per-row
``destination``, the depth probe): both brokers accept most odd names without an ERROR and
route them somewhere else, and an empty name or one too long for a header would only fail on
the broker, mid-job.
"""

from __future__ import annotations

from clustermq.errors import OptionError

#: Longest queue name in UTF-8 bytes. Classic refuses a header line over 10,240 bytes ("The
#: maximum header length was exceeded" on 5.18.3; docs/broker-behaviour.md, "Smaller Classic facts"), and the writer's staging queue
#: ``clustermq.staging.<queue>.<32-hex job>.n<node>`` is about 60 bytes longer than the queue.
MAX_QUEUE_NAME_BYTES = 1024
#: Characters a queue name may not contain, and why (Classic 5.18.3, Artemis 2.40.0: neither
#: broker refuses them, they silently do something else): Classic reads ',' as a
#: composite destination (one SEND lands in several queues) and '?' as the start of destination
#: options (the rest of the name is dropped); '*' and '>' (Classic) and '#' and '*' (Artemis)
#: make a SUBSCRIBE a wildcard subscription that consumes other queues; ':' and whitespace are
#: kept out of headers and logs.
FORBIDDEN_QUEUE_CHARS = ",*>#?:"
#: Classic answers a SEND to a destination with this prefix with statistics instead of queueing.
STATISTICS_PREFIX = "ActiveMQ.Statistics"
#: The STOMP destination prefix users often write; accepted where a destination is expected.
QUEUE_PREFIX = "/queue/"


def queue_name(text: str, option: str = "queue") -> str:
    """``text`` (stripped) if it names exactly one plain queue; ``OptionError`` naming
    ``option`` if not."""
    queue = text.strip()
    if not queue:
        raise OptionError(f"option '{option}' is required: the name of the queue to read or write")
    if queue.startswith("/"):
        raise OptionError(
            f"option '{option}': give the bare queue name, not a destination path ('{queue}')"
        )
    return check_queue_name(queue, option)


def queue_list(text: str, option: str = "queue") -> tuple[str, ...]:
    """The queues of a comma-separated ``text``, each by :func:`queue_name`; ``OptionError``
    naming ``option`` for an empty entry or a queue named twice (it would be read twice)."""
    names = [n.strip() for n in text.split(",")]
    if len(names) > 1 and not all(names):
        raise OptionError(f"option '{option}': '{text.strip()}' has an empty entry; allowed: queue names "
                          "separated by ',' (e.g. 'orders,payments')")
    queues = tuple(queue_name(n, option) for n in names)
    twice = sorted({q for q in queues if queues.count(q) > 1})
    if twice:
        raise OptionError(f"option '{option}': {', '.join(repr(q) for q in twice)} named more than once; "
                          "allowed: each queue once")
    return queues


def destination_queue_name(text: str, option: str = "queue") -> str:
    """Like :func:`queue_name`, also accepting the ``/queue/`` prefix (``/queue/orders``)."""
    stripped = text.strip()
    if stripped.startswith(QUEUE_PREFIX):
        stripped = stripped[len(QUEUE_PREFIX):]
    return queue_name(stripped, option)


def check_queue_name(queue: str, option: str = "queue") -> str:
    """``queue`` if every broker flavor takes it for exactly one queue; ``OptionError`` if not."""
    bad = [c for c in queue if c in FORBIDDEN_QUEUE_CHARS or c.isspace() or not c.isprintable()]
    if bad:
        raise OptionError(
            f"option '{option}': '{queue}' contains {bad[0]!r}; a queue name may not contain "
            "spaces or control characters, ',', ':', '*', '>', '#' or '?' (brokers read them as "
            "composite destinations, wildcards or destination options); allowed: letters, "
            "digits and other printable characters such as '.', '-', '_'"
        )
    if queue.startswith(STATISTICS_PREFIX):
        raise OptionError(
            f"option '{option}': '{queue}' is a broker statistics destination, not a queue; "
            f"allowed: any other name not starting with '{STATISTICS_PREFIX}'"
        )
    size = len(queue.encode("utf-8"))
    if size > MAX_QUEUE_NAME_BYTES:
        raise OptionError(
            f"option '{option}': the name is {size} bytes long in UTF-8; at most "
            f"{MAX_QUEUE_NAME_BYTES} are allowed (a STOMP header line has a broker limit)"
        )
    return queue
