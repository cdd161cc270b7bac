"""A minimal raw-socket STOMP CONNECT probe, used to decide that a broker is ready.

Readiness is polled many times a second while brokers start; stomp.py's connection object
spawns a receiver thread, retries on its own and has no overall connect deadline, all of which
get in the way of a tight polling loop. A CONNECT with the cluster's credentials answered by
CONNECTED is exactly "this node accepts STOMP clients", and needs nothing but a socket.
"""

from __future__ import annotations

import socket
import ssl
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeResult:
    """Outcome of one probe: ``ok`` on CONNECTED; otherwise ``reason`` says what happened."""

    ok: bool
    reason: str
    refused: bool = False  # True when an ERROR frame came back (the broker is up but said no)


def stomp_connect(
    host: str,
    port: int,
    username: str | None,
    password: str | None,
    timeout: float = 2.0,
    tls: ssl.SSLContext | None = None,
) -> ProbeResult:
    """Send one STOMP 1.2 CONNECT and report whether the broker answered CONNECTED.

    With ``tls`` the socket is wrapped first (server name ``host``), so a probe of a TLS node
    also proves that its certificate verifies against the cluster's CA.
    """
    headers = ["accept-version:1.2", f"host:{host}", "heart-beat:0,0"]
    # CONNECT headers are not escaped in STOMP 1.2, so a credential with a newline cannot be sent.
    if username is not None:
        headers.append(f"login:{username}")
    if password is not None:
        headers.append(f"passcode:{password}")
    frame = ("CONNECT\n" + "\n".join(headers) + "\n\n\x00").encode()
    deadline = time.monotonic() + timeout
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
        try:
            # wrap_socket takes over the file descriptor: closing ``sock`` closes it.
            sock = tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw
        except BaseException:
            raw.close()
            raise
        with sock:
            sock.sendall(frame)
            data = b""
            while b"\x00" not in data:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return ProbeResult(False, f"no answer to CONNECT within {timeout:.1f}s")
                sock.settimeout(remaining)
                chunk = sock.recv(65536)
                if not chunk:
                    return ProbeResult(False, "connection closed before the broker answered")
                data += chunk
            text = data.split(b"\x00", 1)[0].decode("utf-8", "replace").lstrip("\r\n")
            head, _, body = text.partition("\n\n")
            lines = head.splitlines()
            command = lines[0].strip() if lines else ""
            if command == "CONNECTED":
                try:
                    sock.sendall(b"DISCONNECT\n\n\x00")
                except OSError:
                    pass
                return ProbeResult(True, "connected")
            message = next(
                (line.split(":", 1)[1] for line in lines[1:] if line.startswith("message:")),
                body.strip() or command,
            )
            return ProbeResult(False, f"{command or 'no frame'}: {message}", refused=True)
    except (TimeoutError, OSError) as exc:
        return ProbeResult(False, f"{type(exc).__name__}: {exc}")
