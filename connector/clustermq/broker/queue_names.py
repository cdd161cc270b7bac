"""The one rule for queue names: what every broker flavor takes for exactly one plain queue,
and what a source may read as a pattern of them.

Applied before anything is consumed or sent (option ``queue``, the writer's per-row
``destination``, the depth probe): both brokers accept most odd names without an ERROR and
route them somewhere else, and an empty name or one too long for a header would only fail on
the broker, mid-job.

A pattern (``orders.>``) is one source over every queue whose name matches. The syntax is
ActiveMQ Classic's: names are dot-separated segments, ``*`` stands for one segment and a final
``>`` for the rest of the name. Classic subscribes a STOMP consumer to every
matching queue, those created later included, and a message's ``destination`` header names the
queue it came from. Artemis has no such thing for queues: a wildcard subscription there is a new
queue that receives a copy of what is sent to the matching addresses after it exists; it reads
none of their backlogs and takes nothing off them (docs/broker-behaviour.md, "Queue patterns").
So whether a pattern may be read is the dialect's to say (``queue_patterns_refused``), and it is
asked before anything subscribes with the pattern.

A pattern must start with a plain segment and may not reach the brokers' or the connector's own
queues (``ActiveMQ.DLQ``, the writer's ``clustermq.staging.*``): a source that drained those
would take dead letters and half-written batches for data.
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
#: what the names of the writer's staging queues start with (write/headers.py)
STAGING_PREFIX = "clustermq.staging"
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
    """The queues of a comma-separated ``text``, each by :func:`name_or_pattern`; ``OptionError``
    naming ``option`` for an empty entry or a queue named twice (it would be read twice). Who
    may not take a pattern refuses it itself."""
    names = [n.strip() for n in text.split(",")]
    if len(names) > 1 and not all(names):
        raise OptionError(f"option '{option}': '{text.strip()}' has an empty entry; allowed: queue names "
                          "separated by ',' (e.g. 'orders,payments')")
    queues = tuple(name_or_pattern(n, option) for n in names)
    twice = sorted({q for q in queues if queues.count(q) > 1})
    if twice:
        raise OptionError(f"option '{option}': {', '.join(repr(q) for q in twice)} named more than once; "
                          "allowed: each queue once")
    return queues


def destination_queue_name(text: str, option: str = "queue") -> str:
    """Like :func:`queue_name`, also accepting the ``/queue/`` prefix (``/queue/orders``) and a
    pattern (``orders.>``: the depth of a pattern is that of every queue it matches)."""
    stripped = text.strip()
    if stripped.startswith(QUEUE_PREFIX):
        stripped = stripped[len(QUEUE_PREFIX):]
    return name_or_pattern(stripped, option)


def name_or_pattern(text: str, option: str = "queue") -> str:
    """``text`` (stripped) by :func:`check_queue_pattern` when it is a pattern, else by
    :func:`queue_name` (which also refuses a destination path such as ``/topic/x.>``)."""
    stripped = text.strip()
    if is_queue_pattern(stripped) and not stripped.startswith("/"):
        return check_queue_pattern(stripped, option)
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


#: one segment (Classic)
ONE_SEGMENT = "*"
#: the rest of the name, last segment only (Classic)
REST = ">"
WILDCARDS = (ONE_SEGMENT, REST)
#: leading segments of queues that belong to a broker or to the connector, never to a pattern
RESERVED = (("ActiveMQ",), tuple(STAGING_PREFIX.split(".")))


def is_queue_pattern(name: str) -> bool:
    """Whether ``name`` has a wildcard segment (``orders.*``, ``orders.>``)."""
    return any(segment in WILDCARDS for segment in name.split("."))


def queue_patterns(queues: tuple[str, ...]) -> list[str]:
    """The patterns among ``queues``, in order."""
    return [q for q in queues if is_queue_pattern(q)]


def check_queue_pattern(pattern: str, option: str = "queue") -> str:
    """``pattern`` if it is a pattern a source may read; ``OptionError`` naming ``option`` if not.

    Every plain segment follows the one queue-name rule (:func:`check_queue_name`)."""
    segments = pattern.split(".")
    allowed = ("allowed: dot-separated segments starting with a name, '*' for one segment and "
               "'>' as the last segment for the rest (e.g. 'orders.>', 'orders.*.eu')")
    if any(REST in s for s in segments[:-1]) or any(
            s not in WILDCARDS and any(c in s for c in ONE_SEGMENT + REST) for s in segments):
        raise OptionError(f"option '{option}': '{pattern}' uses a wildcard inside a segment or '>' "
                          f"before the last segment; {allowed}")
    if not segments[0] or segments[0] in WILDCARDS:
        raise OptionError(f"option '{option}': '{pattern}' starts with a wildcard and would also read "
                          f"the brokers' and the connector's own queues; {allowed}")
    reached = [".".join(r) for r in RESERVED if _could_reach(segments, r)]
    if reached:
        raise OptionError(f"option '{option}': '{pattern}' would read queues the broker or the "
                          f"connector keeps for itself ({', '.join(f'{r}.*' for r in reached)}: "
                          f"dead letters, the writer's staging); {allowed}")
    for segment in segments:
        if segment not in WILDCARDS:
            if not segment:
                raise OptionError(f"option '{option}': '{pattern}' has an empty segment; {allowed}")
            check_queue_name(segment, option)
    check_queue_name(pattern.replace(ONE_SEGMENT, "x").replace(REST, "x"), option)  # its length
    return pattern


def queue_matches(source: str, queue: str) -> bool:
    """Whether the source entry ``source`` (a name or a pattern) reads ``queue``. A final ``>``
    is taken to match no segment too, so that a check against it errs on the side of "read"."""
    if not is_queue_pattern(source):
        return source == queue
    wanted, got = source.split("."), queue.split(".")
    for i, segment in enumerate(wanted):
        if segment == REST:
            return True
        if i >= len(got) or segment not in (ONE_SEGMENT, got[i]):
            return False
    return len(got) == len(wanted)


def _could_reach(segments: list[str], reserved: tuple[str, ...]) -> bool:
    """Whether a pattern matches some name that starts with the ``reserved`` segments."""
    for segment, wanted in zip(segments, reserved, strict=False):
        if segment == REST:
            return True
        if segment not in (ONE_SEGMENT, wanted):
            return False
    return len(segments) >= len(reserved)
