"""Option kinds: how one option's text becomes a typed value.

A kind holds everything its parser needs (the typed default, a minimum, the allowed values), so
the option table (:mod:`clustermq.options.table`) is the one place where a default or a limit is
written. The README shows each default as :attr:`Option.display_default`, derived from the same
value; a default computed from other settings has only its text here (``shown``) and is
computed by the one parser that knows those settings.

Spark hands a Python data source its option names lower-cased and every value as a string.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, Generic, Literal, TypeVar

from clustermq.broker.nodes import Node, parse_nodes
from clustermq.broker.queue_names import queue_list
from clustermq.errors import OptionError

T = TypeVar("T")

#: which side of the connector reads an option
AppliesTo = Literal["read", "write", "both"]


@dataclass(frozen=True)
class Option(ABC, Generic[T]):
    """One option: its name as users write it, what it means, and how it is read."""

    name: str
    _: KW_ONLY
    meaning: str
    applies_to: AppliesTo = "both"
    #: the README's text for a default computed from other settings (or for "no limit")
    shown: str | None = None

    @property
    def key(self) -> str:
        """The name as Spark passes it (lower-cased)."""
        return self.name.lower()

    def text(self, raw: Mapping[str, str]) -> str | None:
        value = raw.get(self.key)
        return None if value is None else str(value)

    def given(self, raw: Mapping[str, str]) -> bool:
        return raw.get(self.key) is not None

    def filled(self, raw: Mapping[str, str]) -> str | None:
        """The text, or ``None`` when not set or set to blanks (numbers and files then take
        their default; booleans and choices refuse blanks)."""
        text = self.text(raw)
        return None if text is None or not text.strip() else text

    @property
    def display_default(self) -> str | None:
        """The default as the README shows it; ``None``: required or unset."""
        return self.shown

    def error(self, problem: str) -> OptionError:
        return OptionError(f"option '{self.name}': {problem}")

    @abstractmethod
    def read(self, raw: Mapping[str, str]) -> T:
        """The typed value; an ``OptionError`` naming the option and what is allowed if bad."""


def _parse_int(option: Option[Any], text: str, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise option.error(f"'{text}' is not an integer") from None
    if value < minimum:
        raise option.error(f"{value} is below the minimum {minimum}")
    return value


@dataclass(frozen=True, kw_only=True)
class Int(Option[int]):
    default: int
    minimum: int

    @property
    def display_default(self) -> str | None:
        return str(self.default)

    def read(self, raw: Mapping[str, str]) -> int:
        text = self.filled(raw)
        if text is None:
            return self.default
        return _parse_int(self, text, self.minimum)


@dataclass(frozen=True, kw_only=True)
class Millis(Int):
    """A duration in milliseconds, as ActiveMQ and Spark users write them."""

    def seconds(self, raw: Mapping[str, str]) -> float:
        return self.read(raw) / 1000.0


@dataclass(frozen=True, kw_only=True)
class OptionalInt(Option[int | None]):
    """An integer whose absence means "no limit" or a default computed from other settings."""

    minimum: int

    def read(self, raw: Mapping[str, str]) -> int | None:
        text = self.filled(raw)
        if text is None:
            return None
        return _parse_int(self, text, self.minimum)

    def read_or(self, raw: Mapping[str, str], computed: int) -> int:
        """The value given, else ``computed`` (the default the table describes in ``shown``)."""
        value = self.read(raw)
        return computed if value is None else value


@dataclass(frozen=True, kw_only=True)
class Float(Option[float]):
    default: float
    minimum: float

    @property
    def display_default(self) -> str | None:
        return f"{self.default:g}"

    def read(self, raw: Mapping[str, str]) -> float:
        text = self.filled(raw)
        if text is None:
            return self.default
        try:
            value = float(text.strip())
        except ValueError:
            raise self.error(f"'{text}' is not a number") from None
        if value < self.minimum:
            raise self.error(f"{value} is below the minimum {self.minimum}")
        return value


@dataclass(frozen=True, kw_only=True)
class Bool(Option[bool]):
    default: bool

    @property
    def display_default(self) -> str | None:
        return "true" if self.default else "false"

    def read(self, raw: Mapping[str, str]) -> bool:
        text = self.text(raw)
        if text is None:
            return self.default
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise self.error(f"'{text}' is not a boolean; allowed: true, false")


@dataclass(frozen=True, kw_only=True)
class Choice(Option[str]):
    """One of ``allowed``, matched without regard to case, returned as ``allowed`` spells it."""

    default: str
    allowed: tuple[str, ...]

    def __post_init__(self) -> None:
        assert self.default in self.allowed, f"option {self.name}: default not in {self.allowed}"

    @property
    def display_default(self) -> str | None:
        return self.default

    def read(self, raw: Mapping[str, str]) -> str:
        text = self.text(raw)
        if text is None:
            return self.default
        for choice in self.allowed:
            if text.strip().lower() == choice.lower():
                return choice
        raise self.error(f"'{text}' is not allowed; allowed: {', '.join(self.allowed)}")


@dataclass(frozen=True, kw_only=True)
class File(Option[str | None]):
    """An absolute path to a readable file, or ``None`` (the table's ``shown`` says what then).

    Checked where options are parsed, on the driver, so a typo fails ``load()``/``save()``
    naming the option instead of every task.
    """

    def read(self, raw: Mapping[str, str]) -> str | None:
        text = self.filled(raw)
        if text is None:
            return None
        path = os.path.abspath(os.path.expanduser(text.strip()))
        if not os.path.isfile(path):
            raise self.error(f"file '{path}' does not exist")
        if not os.access(path, os.R_OK):
            raise self.error(f"file '{path}' is not readable")
        return path


@dataclass(frozen=True, kw_only=True)
class Text(Option[str | None]):
    """A string taken as given (``None`` when not set)."""

    def read(self, raw: Mapping[str, str]) -> str | None:
        return self.text(raw)


@dataclass(frozen=True, kw_only=True)
class Selector(Option[str | None]):
    """A JMS message selector. Only its form is checked here (not blank, characters a STOMP
    header can carry): its grammar is the broker's to judge, and brokers differ in what they
    accept, so a node is asked before anything is consumed (broker/selector_check.py)."""

    def read(self, raw: Mapping[str, str]) -> str | None:
        text = self.text(raw)
        if text is None:
            return None
        if not text.strip():
            raise self.error("is blank; give a JMS selector (e.g. \"region = 'EU'\") or leave it unset")
        if "\x00" in text:
            raise self.error("contains a NUL character, which a STOMP header cannot carry")
        return text.strip()


@dataclass(frozen=True, kw_only=True)
class HeaderName(Option[str]):
    """A STOMP header name; blank or unset means the default."""

    default: str

    @property
    def display_default(self) -> str | None:
        return self.default

    def read(self, raw: Mapping[str, str]) -> str:
        header = (self.text(raw) or self.default).strip()
        if not header or any(c in header for c in ":\n\r"):
            raise self.error(f"'{header}' is not a valid STOMP header name")
        return header


@dataclass(frozen=True, kw_only=True)
class NodeList(Option[tuple[Node, ...]]):
    """Comma-separated broker addresses (required; the node parser names the option)."""

    def read(self, raw: Mapping[str, str]) -> tuple[Node, ...]:
        try:
            return parse_nodes(self.text(raw) or "", self.name)
        except ValueError as exc:
            raise OptionError(str(exc)) from None


@dataclass(frozen=True, kw_only=True)
class QueueNames(Option[tuple[str, ...]]):
    """One plain queue name or a comma-separated list of them (required), each by the one
    queue-name rule of the broker layer; what may take a list is for the reader and writer
    options to say (options/parsed.py)."""

    def read(self, raw: Mapping[str, str]) -> tuple[str, ...]:
        return queue_list(self.text(raw) or "", self.name)
