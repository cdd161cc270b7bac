"""Broker node addresses.

A node's *name* is the key of its offset in the checkpoint, so it must be stable across runs:
it is the address exactly as the user wrote it, normalised to ``host:port`` (plus the scheme
when it is not plain ``stomp``). A failover group ``masterslave:(a:1,b:2)`` (a master/slave or
primary/backup pair sharing one store) is one node: its name is the group as written, so the
offset key does not change with whichever member is live.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from clustermq.errors import OptionError

SCHEMES = ("stomp", "stomp+nio", "stomp+ssl", "stomp+nio+ssl")
GROUP_PREFIX = "masterslave:"


@dataclass(frozen=True)
class TlsSettings:
    """How to set up TLS to a ``stomp+ssl://`` node (options ``sslCaFile`` ... ``sslVerifyHostname``).

    Kept on the :class:`Node` itself (outside its identity) so that every code path that opens a
    connection to a node -- reader, writer, depth probe, browse, staging -- uses the same TLS
    settings without each of them having to pass the options along. No secret lives here.
    """

    ca_file: str | None = None  # PEM bundle of trusted CAs; None: the system trust store
    cert_file: str | None = None  # client certificate (PEM) for mutual TLS
    key_file: str | None = None  # its unencrypted private key (PEM); None: in cert_file
    verify_hostname: bool = True


@dataclass(frozen=True, order=True)
class Node:
    """One broker node of the cluster.

    ``tls`` is excluded from equality, ordering and ``repr``: a node is identified by its address
    (its name is the offset key), not by how its certificate is checked.
    """

    host: str
    port: int
    ssl: bool = False
    tls: TlsSettings | None = field(default=None, compare=False, repr=False)
    # A failover group's members in failover order (host/port/ssl are then the first member's,
    # ssl true when any member uses TLS); empty for a plain node.
    members: tuple[Node, ...] = ()

    @cached_property
    def name(self) -> str:
        """Cached: the read path asks for it several times per message (a node is immutable)."""
        if self.members:
            return f"{GROUP_PREFIX}({','.join(m.name for m in self.members)})"
        base = f"{self.host}:{self.port}"
        return f"ssl://{base}" if self.ssl else base

    def endpoints(self) -> tuple[Node, ...]:
        """The addresses to try, in order, each carrying this node's TLS settings."""
        if not self.members:
            return (self,)
        return tuple(replace(m, tls=self.tls) if m.ssl else m for m in self.members)

    def __str__(self) -> str:
        return self.name


def parse_node(text: str, option: str = "brokers") -> Node:
    """Parse ``[scheme://]host:port``; raise ``OptionError`` (a ``ValueError``) naming ``option``
    on bad input."""
    raw = text.strip()
    allowed = "expected host:port or stomp[+ssl]://host:port"
    if not raw:
        raise OptionError(f"option '{option}': empty broker address; {allowed}")
    ssl = False
    rest = raw
    if "://" in raw:
        scheme, rest = raw.split("://", 1)
        scheme = scheme.lower()
        if scheme not in SCHEMES and scheme != "ssl":
            raise OptionError(
                f"option '{option}': unknown scheme '{scheme}' in '{raw}'; "
                f"allowed schemes: {', '.join(SCHEMES)}"
            )
        ssl = scheme.endswith("ssl")
    rest = rest.rstrip("/")
    if rest.startswith("["):  # [::1]:61613
        host, sep, port_text = rest[1:].partition("]:")
    else:
        host, sep, port_text = rest.rpartition(":")
    if not sep or not host:
        raise OptionError(f"option '{option}': '{raw}' has no port; {allowed}")
    try:
        port = int(port_text)
    except ValueError:
        raise OptionError(
            f"option '{option}': port '{port_text}' in '{raw}' is not a number; {allowed}"
        ) from None
    if not 0 < port < 65536:
        raise OptionError(f"option '{option}': port {port} in '{raw}' is outside 1-65535")
    return Node(host=host, port=port, ssl=ssl)


GROUP_GRAMMAR = (
    "a node is host:port, stomp+ssl://host:port or a failover group "
    "masterslave:(host:port,host:port[,...]) of two or more such addresses in failover order"
)


def _split_top_level(text: str, option: str) -> list[str]:
    """Split on the commas outside ``masterslave:( ... )``."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
            if depth > 1:
                raise OptionError(f"option '{option}': nested parentheses in '{text}'; {GROUP_GRAMMAR}")
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise OptionError(f"option '{option}': unbalanced ')' in '{text}'; {GROUP_GRAMMAR}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise OptionError(f"option '{option}': unclosed '(' in '{text}'; {GROUP_GRAMMAR}")
    parts.append("".join(current))
    return parts


def parse_group(text: str, option: str = "brokers") -> Node:
    """Parse ``masterslave:(a,b,...)`` into one node whose members are tried in order."""
    raw = text.strip()
    inner = raw[len(GROUP_PREFIX):].strip()
    if not (inner.startswith("(") and inner.endswith(")")):
        raise OptionError(f"option '{option}': '{raw}' is not a failover group; {GROUP_GRAMMAR}")
    members = tuple(parse_node(part, option) for part in inner[1:-1].split(","))
    if len(members) < 2:
        raise OptionError(f"option '{option}': failover group '{raw}' has one member; {GROUP_GRAMMAR}")
    first = members[0]
    return Node(host=first.host, port=first.port, ssl=any(m.ssl for m in members), members=members)


def parse_nodes(text: str, option: str = "brokers") -> tuple[Node, ...]:
    """Parse a comma-separated node list; duplicates are an error (they would share an offset)."""
    if text is None or not text.strip():
        raise OptionError(f"option '{option}' is required: a comma-separated list of host:port")
    nodes = tuple(
        parse_group(part, option) if part.strip().lower().startswith(GROUP_PREFIX) else parse_node(part, option)
        for part in _split_top_level(text, option)
    )
    seen: set[str] = set()
    for node in nodes:
        for address in (node.name, *(m.name for m in node.members)):
            if address in seen:
                raise OptionError(f"option '{option}': node '{address}' is listed twice")
            seen.add(address)
    return nodes


def _format_one(node: Node) -> str:
    return ("stomp+ssl://" if node.ssl else "") + f"{node.host}:{node.port}"


def format_nodes(nodes: tuple[Node, ...] | list[Node]) -> str:
    """The ``brokers`` option string for a node list (inverse of :func:`parse_nodes`)."""
    return ",".join(
        f"{GROUP_PREFIX}({','.join(_format_one(m) for m in n.members)})" if n.members else _format_one(n)
        for n in nodes
    )
