"""Options: parsed once, validated before anything is consumed, typed for the rest of the code.

Spark hands a Python data source its options lower-cased with string values. Every option the
connector knows is declared once in :data:`OPTIONS` (name, default, meaning); the README's
option table is checked against this list by a test, so the two cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from clustermq.broker.nodes import Node, TlsSettings, parse_nodes
from clustermq.broker.queue_names import queue_name
from clustermq.broker.settings import ConnectionOptions, ReconnectPolicy, Secret
from clustermq.errors import OptionError

FLAVORS = ("auto", "classic", "artemis")
ACK_MODES = ("client", "client-individual")
LOAD_BALANCING_POLICIES = ("roundRobin", "random", "randomSticky", "firstElement")
READ_MODES = ("browse", "drain")


@dataclass(frozen=True)
class OptionSpec:
    name: str
    default: str | None
    meaning: str
    applies_to: str  # "read", "write" or "both"


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("brokers", None, "Comma-separated STOMP endpoints of the cluster nodes, `host:port` or `stomp+ssl://host:port`. Required.", "both"),
    OptionSpec("queue", None, "Queue name (without `/queue/`). Required. At most 1024 bytes; no spaces, control characters, `,` `:` `*` `>` `#` `?` (brokers read them as composite destinations, wildcards or destination options).", "both"),
    OptionSpec("flavor", "auto", "Broker kind: `auto` (from the CONNECTED frame's `server` header), `classic` or `artemis`.", "both"),
    OptionSpec("username", None, "Login user for every node.", "both"),
    OptionSpec("password", None, "Login password. Never logged, never shown in errors, progress or `repr()`.", "both"),
    OptionSpec("numPartitions", "number of nodes", "Spark partitions per micro-batch; rows are hash-partitioned by group id.", "read"),
    OptionSpec("maxMessagesPerTrigger", "none", "Upper bound on messages per micro-batch over all nodes.", "read"),
    OptionSpec("maxBytesPerTrigger", "none", "Upper bound on body bytes per micro-batch over all nodes (a batch holds at least one message).", "read"),
    OptionSpec("prefetchPerNode", "2 x maxMessagesPerTrigger, else 10000", "Messages a node may deliver ahead of acknowledgement (Classic `activemq.prefetchSize`; Artemis `consumer-window-size`, sized in bytes from it, see Flavors); bounds driver memory and the largest batch per node.", "read"),
    OptionSpec("groupIdHeader", "clustermq_group", "Header that carries the group id where the broker does not return its own group header (Classic drops `JMSXGroupID` on STOMP).", "both"),
    OptionSpec("ackMode", "client", "STOMP ack mode: `client` (one cumulative ACK per node per batch) or `client-individual`.", "read"),
    OptionSpec("initialReconnectDelay", "1000", "Milliseconds before the first reconnect attempt to a lost node.", "both"),
    OptionSpec("maxReconnectDelay", "30000", "Upper bound in milliseconds between reconnect attempts.", "both"),
    OptionSpec("useExponentialBackOff", "true", "Grow the reconnect delay by `backOffMultiplier` after each failed attempt.", "both"),
    OptionSpec("backOffMultiplier", "2", "Factor of the exponential back-off.", "both"),
    OptionSpec("sslCaFile", "system trust store", "PEM file of the CA(s) that signed the brokers' certificates, for `stomp+ssl://` nodes. Checked to exist when options are parsed.", "both"),
    OptionSpec("sslCertFile", None, "Client certificate (PEM) for mutual TLS with `stomp+ssl://` nodes; may hold the private key too.", "both"),
    OptionSpec("sslKeyFile", "the key in sslCertFile", "Unencrypted private key (PEM) of `sslCertFile`.", "both"),
    OptionSpec("sslVerifyHostname", "true", "Check that a `stomp+ssl://` node's certificate names the host given in `brokers` (SAN DNS or IP). The chain is always verified.", "both"),
    OptionSpec("connectTimeout", "10000", "Milliseconds to wait for a node's CONNECTED frame.", "both"),
    OptionSpec("heartbeat", "10000", "STOMP heart-beat interval in milliseconds, both directions (0 disables); a node silent for 2.5 times this is declared lost.", "both"),
    OptionSpec("noNodeTimeout", "120000", "The query fails when no node has been reachable for this many milliseconds.", "read"),
    OptionSpec("availableNowIdleTimeout", "30000", "Trigger.AvailableNow: stop waiting for the backlog measured at start when, with every message received already planned, no message arrived for this many milliseconds while the queue still holds messages (a stalled Classic bridge holds them until it is rebuilt, about 10 s in the local cluster); a queue found empty ends the run within seconds (competing consumers took the rest). After a third of it (at most 3 s) nodes are resubscribed once, see docs/design.md.", "read"),
    OptionSpec("replayTimeout", "60000", "Milliseconds a replayed batch waits for the brokers to redeliver its messages after a restart.", "read"),
    OptionSpec("loadBalancingPolicy", "roundRobin", "Writer: how a task picks the node for rows without a group id: `roundRobin` (task i of a job to node start + i), `random` (per task), `randomSticky` (one random node per job or streaming query), `firstElement` (the first listed node). Rows with a group id always go to the node their group hashes to.", "write"),
    OptionSpec("persistent", "true", "Writer: send messages persistent (`persistent:true`), so they survive a broker restart.", "write"),
    OptionSpec("headersFromColumns", "false", "Writer: turn input columns other than `body`, `group_id`, `headers`, `priority`, `destination` into message headers (column name = header name) instead of rejecting them.", "write"),
    OptionSpec("receiptTimeout", "60000", "Writer: milliseconds to wait for a broker's RECEIPT of a COMMIT, and for the next staged message while the driver moves a job into the queue.", "write"),
    OptionSpec("mode", "browse", "Batch read (`spark.read`): `browse` returns a snapshot of the queue on every node (one partition per node) without consuming it; ActiveMQ Classic only. `drain` is refused: emptying a queue needs acknowledgement on commit, i.e. a streaming read with `Trigger.AvailableNow` (`spark_jobs/export_backlog.py --mode drain`).", "read"),
    OptionSpec("browseIdleTimeout", "30000", "Batch read: milliseconds a node's browse may go without a message before the read fails.", "read"),
)

_BY_LOWER = {spec.name.lower(): spec for spec in OPTIONS}


def known_options(applies_to: str) -> list[str]:
    return [s.name for s in OPTIONS if s.applies_to in (applies_to, "both")]


def _check_known(raw: Mapping[str, str], applies_to: str) -> dict[str, str]:
    allowed = {n.lower(): n for n in known_options(applies_to)}
    lowered: dict[str, str] = {}
    for key, value in raw.items():
        k = key.lower()
        if k == "path":  # Spark passes load(path)/save(path) as option "path"
            continue
        if k not in allowed:
            role = {"write": "writer"}.get(applies_to, f"{applies_to}er")
            raise OptionError(
                f"unknown option '{key}' for the clustermq {role}; "
                f"known options: {', '.join(sorted(allowed.values()))}"
            )
        lowered[k] = value
    return lowered


def _int(raw: Mapping[str, str], name: str, minimum: int, default: int | None) -> int | None:
    text = raw.get(name.lower())
    if text is None or str(text).strip() == "":
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        raise OptionError(f"option '{name}': '{text}' is not an integer") from None
    if value < minimum:
        raise OptionError(f"option '{name}': {value} is below the minimum {minimum}")
    return value


def _float(raw: Mapping[str, str], name: str, minimum: float, default: float) -> float:
    text = raw.get(name.lower())
    if text is None or str(text).strip() == "":
        return default
    try:
        value = float(str(text).strip())
    except ValueError:
        raise OptionError(f"option '{name}': '{text}' is not a number") from None
    if value < minimum:
        raise OptionError(f"option '{name}': {value} is below the minimum {minimum}")
    return value


def _bool(raw: Mapping[str, str], name: str, default: bool) -> bool:
    text = raw.get(name.lower())
    if text is None:
        return default
    lowered = str(text).strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise OptionError(f"option '{name}': '{text}' is not a boolean; allowed: true, false")


def _choice(raw: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    text = raw.get(name.lower())
    if text is None:
        return default
    for choice in choices:
        if str(text).strip().lower() == choice.lower():
            return choice
    raise OptionError(f"option '{name}': '{text}' is not allowed; allowed: {', '.join(choices)}")


def _queue(raw: Mapping[str, str]) -> str:
    return queue_name(raw.get("queue") or "")


TLS_OPTIONS = ("sslCaFile", "sslCertFile", "sslKeyFile", "sslVerifyHostname")


def _existing_file(raw: Mapping[str, str], name: str) -> str | None:
    """An absolute path to a readable file, or ``None``; a bad path fails naming ``name``."""
    text = raw.get(name.lower())
    if text is None or str(text).strip() == "":
        return None
    path = os.path.abspath(os.path.expanduser(str(text).strip()))
    if not os.path.isfile(path):
        raise OptionError(f"option '{name}': file '{path}' does not exist")
    if not os.access(path, os.R_OK):
        raise OptionError(f"option '{name}': file '{path}' is not readable")
    return path


def _refuse_key_prompt() -> bytes:
    raise OptionError("option 'sslKeyFile': the private key is encrypted; give an unencrypted key")


def parse_tls(raw: Mapping[str, str], nodes: tuple[Node, ...]) -> TlsSettings | None:
    """The TLS settings for the ``stomp+ssl://`` nodes; ``None`` when no node uses TLS.

    TLS options with no ``stomp+ssl://`` node are an error, not a warning: a user who sets a CA
    file believes the connection is encrypted, and a silent plain-text connection (with the
    password on the wire) is the failure that must not go unnoticed. Files are checked here, on
    the driver, so a typo fails ``load()``/``save()`` naming the option instead of every task.
    """
    given = [name for name in TLS_OPTIONS if raw.get(name.lower()) is not None]
    if not any(node.ssl for node in nodes):
        if given:
            raise OptionError(
                f"option '{given[0]}' is set but no node in 'brokers' uses TLS; write the nodes "
                "as stomp+ssl://host:port (or drop the ssl options)"
            )
        return None
    ca_file = _existing_file(raw, "sslCaFile")
    cert_file = _existing_file(raw, "sslCertFile")
    key_file = _existing_file(raw, "sslKeyFile")
    if key_file and not cert_file:
        raise OptionError("option 'sslKeyFile' is set but 'sslCertFile' is not")
    if ca_file:
        try:
            ssl.create_default_context(cafile=ca_file)
        except (ssl.SSLError, ValueError) as exc:
            raise OptionError(f"option 'sslCaFile': '{ca_file}' holds no usable PEM certificate ({exc})") from None
    if cert_file:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert_file, key_file, password=_refuse_key_prompt)
        except ssl.SSLError as exc:
            which = "sslKeyFile" if key_file else "sslCertFile"
            raise OptionError(
                f"option '{which}': cannot load the client certificate and key ({exc.reason or exc})"
            ) from None
    return TlsSettings(
        ca_file=ca_file,
        cert_file=cert_file,
        key_file=key_file,
        verify_hostname=_bool(raw, "sslVerifyHostname", True),
    )


def parse_connection_options(raw: Mapping[str, str]) -> ConnectionOptions:
    try:
        nodes = parse_nodes(raw.get("brokers", ""))
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    tls = parse_tls(raw, nodes)
    if tls is not None:
        nodes = tuple(dataclasses.replace(n, tls=tls) if n.ssl else n for n in nodes)
    initial = _int(raw, "initialReconnectDelay", 0, 1000)
    maximum = _int(raw, "maxReconnectDelay", 1, 30000)
    assert initial is not None and maximum is not None
    if initial > maximum:
        raise OptionError(
            f"option 'initialReconnectDelay' ({initial}) must not exceed "
            f"'maxReconnectDelay' ({maximum})"
        )
    password = raw.get("password")
    username = raw.get("username")
    if password is not None and not username:
        raise OptionError("option 'password' is set but 'username' is not")
    header = (raw.get("groupidheader") or "clustermq_group").strip()
    if not header or any(c in header for c in ":\n\r"):
        raise OptionError(f"option 'groupIdHeader': '{header}' is not a valid STOMP header name")
    connect_timeout = _int(raw, "connectTimeout", 1, 10000)
    heartbeat = _int(raw, "heartbeat", 0, 10000)
    assert connect_timeout is not None and heartbeat is not None
    return ConnectionOptions(
        nodes=nodes,
        queue=_queue(raw),
        flavor=_choice(raw, "flavor", FLAVORS, "auto"),
        username=username,
        password=Secret(password) if password is not None else None,
        group_id_header=header,
        reconnect=ReconnectPolicy(
            initial_delay_s=initial / 1000.0,
            max_delay_s=maximum / 1000.0,
            exponential=_bool(raw, "useExponentialBackOff", True),
            multiplier=_float(raw, "backOffMultiplier", 1.0, 2.0),
        ),
        connect_timeout_s=connect_timeout / 1000.0,
        heartbeat_ms=heartbeat,
        tls=tls,
    )


@dataclass(frozen=True)
class ReadOptions:
    """Validated options of the streaming reader."""

    connection: ConnectionOptions
    num_partitions: int
    max_messages_per_trigger: int | None
    max_bytes_per_trigger: int | None
    prefetch_per_node: int
    ack_mode: str
    no_node_timeout_s: float
    available_now_idle_timeout_s: float
    replay_timeout_s: float
    mode: str = "browse"
    browse_idle_timeout_s: float = 30.0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        raw = _check_known(options, "read")
        conn = parse_connection_options(raw)
        max_messages = _int(raw, "maxMessagesPerTrigger", 1, None)
        max_bytes = _int(raw, "maxBytesPerTrigger", 1, None)
        prefetch_default = 2 * max_messages if max_messages else 10000
        prefetch = _int(raw, "prefetchPerNode", 1, prefetch_default)
        assert prefetch is not None
        partitions = _int(raw, "numPartitions", 1, len(conn.nodes))
        assert partitions is not None
        no_node = _int(raw, "noNodeTimeout", 1, 120000)
        idle = _int(raw, "availableNowIdleTimeout", 1, 30000)
        replay = _int(raw, "replayTimeout", 1, 60000)
        assert no_node is not None and idle is not None and replay is not None
        browse_idle = _int(raw, "browseIdleTimeout", 1, 30000)
        assert browse_idle is not None
        return cls(
            connection=conn,
            num_partitions=partitions,
            max_messages_per_trigger=max_messages,
            max_bytes_per_trigger=max_bytes,
            prefetch_per_node=prefetch,
            ack_mode=_choice(raw, "ackMode", ACK_MODES, "client"),
            no_node_timeout_s=no_node / 1000.0,
            available_now_idle_timeout_s=idle / 1000.0,
            replay_timeout_s=replay / 1000.0,
            mode=_choice(raw, "mode", READ_MODES, "browse"),
            browse_idle_timeout_s=browse_idle / 1000.0,
        )


@dataclass(frozen=True)
class WriteOptions:
    """Validated options of the batch and streaming writer."""

    connection: ConnectionOptions
    load_balancing_policy: str
    persistent: bool
    headers_from_columns: bool
    receipt_timeout_s: float

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        # writeStream passes its checkpointLocation to the sink like any other option.
        given = {k: v for k, v in options.items() if k.lower() != "checkpointlocation"}
        raw = _check_known(given, "write")
        conn = parse_connection_options(raw)
        receipt = _int(raw, "receiptTimeout", 1, 60000)
        assert receipt is not None
        return cls(
            connection=conn,
            load_balancing_policy=_choice(
                raw, "loadBalancingPolicy", LOAD_BALANCING_POLICIES, "roundRobin"
            ),
            persistent=_bool(raw, "persistent", True),
            headers_from_columns=_bool(raw, "headersFromColumns", False),
            receipt_timeout_s=receipt / 1000.0,
        )
