"""A small threaded TCP proxy that tests put between the reader and one broker node.

A real network cut rarely closes sockets: a partition (a dead switch, a dropped route, a frozen
VM) leaves both ends open and simply stops carrying bytes. Killing a broker cannot reproduce
that, because the kernel closes the broker's sockets and the client sees EOF at once. The proxy
can: ``stall()`` stops forwarding in both directions while keeping every socket open, so only
STOMP heart-beats can tell that the node is gone; ``drop()`` closes the connections (the
"cable pulled, RST" case). While cut, new connections are accepted and closed at once (a
reconnect attempt fails fast, as against a dead route with an ICMP reject). ``resume()`` goes
back to forwarding.

Usage::

    with TcpProxy("127.0.0.1", broker_port) as proxy:
        brokers = f"127.0.0.1:{proxy.port}"
        ...
        proxy.stall(); ...; proxy.resume()
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from typing import Literal

log = logging.getLogger("tests.tcpproxy")

Mode = Literal["pass", "stall", "drop"]


class _Pair:
    """One client connection and its upstream connection, pumped by one thread."""

    def __init__(self, proxy: TcpProxy, client: socket.socket, upstream: socket.socket,
                 number: int) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        #: the order in which the proxy accepted it (1 for the first)
        self.number = number
        self.to_client = 0
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._pump, daemon=True, name="tcpproxy-pair")

    def _pump(self) -> None:
        """Copy bytes both ways while the proxy forwards; while stalled, read nothing at all.

        Not reading is what makes a stall look like a cut network: the peer's bytes sit in
        kernel buffers, nothing reaches the other side, and no socket is closed.
        """
        peer = {self.client: self.upstream, self.upstream: self.client}
        sel = selectors.DefaultSelector()
        try:
            for sock in (self.client, self.upstream):
                sock.setblocking(False)
                sel.register(sock, selectors.EVENT_READ)
            while not self.closed.is_set():
                if self.proxy.mode != "pass":
                    if self.proxy.mode == "drop":
                        return
                    self.proxy._changed.wait(0.05)  # stalled: keep sockets, move no byte
                    continue
                for key, _ in sel.select(timeout=0.05):
                    if self.proxy.mode != "pass":
                        break
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = src.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        return
                    if not data:
                        return
                    if not self._send_all(peer[src], data):
                        return
                    if src is self.upstream:
                        self.proxy.forwarded_to_client += len(data)
                        self.to_client += len(data)
                    else:
                        self.proxy.forwarded_to_upstream += len(data)
        finally:
            sel.close()
            self.close()

    def _send_all(self, dst: socket.socket, data: bytes) -> bool:
        view = memoryview(data)
        while view:
            if self.closed.is_set():
                return False
            try:
                sent = dst.send(view)
                view = view[sent:]
            except (BlockingIOError, InterruptedError):
                time.sleep(0.001)
            except OSError:
                return False
        return True

    def close(self) -> None:
        self.closed.set()
        for sock in (self.client, self.upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass
        self.proxy._forget(self)


class TcpProxy:
    """Listens on a dynamic loopback port and forwards every connection to ``(host, port)``."""

    def __init__(self, host: str, port: int, listen_host: str = "127.0.0.1") -> None:
        self.target = (host, port)
        self._listener = socket.create_server((listen_host, 0))
        self._listener.settimeout(0.1)
        self.host, self.port = self._listener.getsockname()[:2]
        self.mode: Mode = "pass"
        self._changed = threading.Event()
        self._pairs: set[_Pair] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.accepted = 0
        self.refused = 0
        self.forwarded_to_client = 0
        self.forwarded_to_upstream = 0
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True, name="tcpproxy-accept")
        self._acceptor.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # ------------------------------------------------------------------ control
    def stall(self) -> None:
        """Stop forwarding both ways; keep every socket open; refuse new connections."""
        self._set("stall")

    def drop(self) -> None:
        """Close every proxied connection; refuse new ones until :meth:`resume`."""
        self._set("drop")
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            pair.close()

    def resume(self) -> None:
        """Forward again (connections that survived a stall carry on where they stopped)."""
        self._set("pass")

    def _set(self, mode: Mode) -> None:
        log.info("proxy %s -> %s:%d: %s", self.address, *self.target, mode)
        self.mode = mode
        self._changed.set()
        self._changed.clear()

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def open_connections(self) -> dict[int, int]:
        """Each open connection by the order it was accepted in: the bytes it carried to the
        client. A reader's consuming connection is the one that carried its messages; others
        may be short-lived (the reader's depth probe connects every few seconds)."""
        with self._lock:
            return {pair.number: pair.to_client for pair in self._pairs}

    # ------------------------------------------------------------------ plumbing
    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.mode != "pass":
                self.refused += 1
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                self.refused += 1
                client.close()
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.accepted += 1
                pair = _Pair(self, client, upstream, self.accepted)
                self._pairs.add(pair)
            pair.thread.start()

    def _forget(self, pair: _Pair) -> None:
        with self._lock:
            self._pairs.discard(pair)

    def close(self) -> None:
        """Stop listening and close every connection; waits for the proxy's threads."""
        self._stopping.set()
        self._set("drop")
        try:
            self._listener.close()
        except OSError:
            pass
        self._acceptor.join(timeout=5)
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            pair.close()
            pair.thread.join(timeout=5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
