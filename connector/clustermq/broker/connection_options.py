"""The typed settings every connection to the cluster is made with.

Parsed from the user's options by :mod:`clustermq.options`; the broker layer only ever sees
these objects, never raw option strings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from clustermq.broker.nodes import Node, TlsSettings
from clustermq.errors import OptionError


@dataclass(frozen=True)
class Secret:
    """A password that never shows itself in logs, errors or ``repr()``."""

    _value: str = field(repr=False)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


@dataclass(frozen=True)
class ReconnectPolicy:
    """Back-off between reconnect attempts, named as in ActiveMQ's failover transport."""

    initial_delay_s: float = 1.0
    max_delay_s: float = 30.0
    exponential: bool = True
    multiplier: float = 2.0

    def delays(self) -> Callable[[], float]:
        """A stateful generator of successive delays (one per failed attempt)."""
        state = {"next": self.initial_delay_s}

        def next_delay() -> float:
            delay = state["next"]
            if self.exponential:
                state["next"] = min(self.max_delay_s, delay * self.multiplier)
            return min(delay, self.max_delay_s)

        return next_delay


@dataclass(frozen=True)
class TopicSubscription:
    """A reader's subscription to a topic (option ``topic``): durable under ``name``, or not.

    A durable subscription is known to the broker by a client id and a name; the client id is
    made from both the topic and the name, so that two queries with different subscriptions
    never share one (Classic refuses a second connection with a client id in use, and Artemis
    names the subscription's queue ``<client id>.<name>`` whatever the topic).
    """

    topic: str
    #: ``subscriptionName``; ``None``: a non-durable subscription (``allowNonDurable``)
    name: str | None = None

    @property
    def client_id(self) -> str | None:
        """The CONNECT ``client-id`` of a durable subscription; ``None`` for a non-durable one."""
        return f"clustermq.{self.topic}.{self.name}" if self.name is not None else None


@dataclass(frozen=True)
class ConnectionOptions:
    """What every connection to the cluster needs, for reading and writing alike."""

    nodes: tuple[Node, ...]
    #: the queues of option ``queue``: one, or several for a reader (options/parsed.py)
    queues: tuple[str, ...]
    flavor: str
    username: str | None
    password: Secret | None
    group_id_header: str
    reconnect: ReconnectPolicy
    connect_timeout_s: float
    heartbeat_ms: int
    tls: TlsSettings | None = None  # also on every stomp+ssl node (Node.tls), where it is used
    #: a reader of a topic (option ``topic``): ``queues`` then holds the topic's name alone
    topic: TopicSubscription | None = None

    @property
    def queue(self) -> str:
        """The one queue of a writer or a depth probe; reader code that may hold several loops
        over :attr:`queues` instead. Options that take one queue refuse a list when parsed, so
        this refusal is a last guard."""
        if len(self.queues) != 1:
            raise OptionError(f"option 'queue': {len(self.queues)} queues ({self.queue_names}) "
                              "where one is allowed")
        return self.queues[0]

    @property
    def queue_names(self) -> str:
        """The queues as the user wrote them, for messages and logs."""
        return ",".join(self.queues)

    @property
    def is_topic(self) -> bool:
        """Whether rows go to (or come from) a topic: a writer then targets the topic's
        destination and stages without the brokers' queue-to-queue move."""
        return self.topic is not None

    @property
    def described(self) -> str:
        """What is read or written, for messages and logs: ``queue 'a,b'`` or ``topic 't'``."""
        return f"topic '{self.topic.topic}'" if self.topic is not None else f"queue '{self.queue_names}'"

    @property
    def login(self) -> tuple[str | None, str | None]:
        return self.username, self.password.reveal() if self.password else None
