"""Broker node addresses.

A node's *name* is the key of its offset in the checkpoint, so it must be stable across runs:
it is the address exactly as the user wrote it, normalised to ``host:port`` (plus the scheme
when it is not plain ``stomp``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

SCHEMES = ("stomp", "stomp+nio", "stomp+ssl", "stomp+nio+ssl")


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

    @property
    def name(self) -> str:
        base = f"{self.host}:{self.port}"
        return f"ssl://{base}" if self.ssl else base

    def __str__(self) -> str:
        return self.name


def parse_node(text: str, option: str = "brokers") -> Node:
    """Parse ``[scheme://]host:port``; raise ``ValueError`` naming ``option`` on bad input."""
    raw = text.strip()
    allowed = "expected host:port or stomp[+ssl]://host:port"
    if not raw:
        raise ValueError(f"option '{option}': empty broker address; {allowed}")
    ssl = False
    rest = raw
    if "://" in raw:
        scheme, rest = raw.split("://", 1)
        scheme = scheme.lower()
        if scheme not in SCHEMES and scheme != "ssl":
            raise ValueError(
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
        raise ValueError(f"option '{option}': '{raw}' has no port; {allowed}")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(
            f"option '{option}': port '{port_text}' in '{raw}' is not a number; {allowed}"
        ) from None
    if not 0 < port < 65536:
        raise ValueError(f"option '{option}': port {port} in '{raw}' is outside 1-65535")
    return Node(host=host, port=port, ssl=ssl)


def parse_nodes(text: str, option: str = "brokers") -> tuple[Node, ...]:
    """Parse a comma-separated node list; duplicates are an error (they would share an offset)."""
    if text is None or not text.strip():
        raise ValueError(f"option '{option}' is required: a comma-separated list of host:port")
    nodes = tuple(parse_node(part, option) for part in text.split(","))
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise ValueError(f"option '{option}': node '{node.name}' is listed twice")
        seen.add(node.name)
    return nodes


def format_nodes(nodes: tuple[Node, ...] | list[Node]) -> str:
    """The ``brokers`` option string for a node list (inverse of :func:`parse_nodes`)."""
    return ",".join(("stomp+ssl://" if n.ssl else "") + f"{n.host}:{n.port}" for n in nodes)
