"""A TLS connection's end, made safe on stomp.py 9's single I/O thread.

stomp.py 9 reads and writes a TLS socket from one thread (OpenSSL's connection objects are not
safe to use from two threads at once), non-blocking, and takes an empty read for "no data yet".
Two consequences, both measured against the local cluster's TLS nodes:

* A node that closes the connection is never noticed: the I/O thread keeps reading the closed
  socket (one core at 100 %) and ``on_disconnected`` never comes, so a refused login whose
  ERROR frame never came (Classic omits it now and then), or a node that went away, looked like a
  node that never answers.
* Closing the connection from another thread (``disconnect_socket``: ours after a refused login,
  stomp.py's heart-beat thread) runs OpenSSL's shutdown while the I/O thread reads the same
  connection; against a node on the plain ``stomp+ssl`` transport that killed the Python
  process with a segmentation fault in 2 of 3 runs of 900-1,800 refused logins.

:func:`install` fixes both on one connection: an empty read of a TLS socket is the end of the
stream (Python's ``SSLSocket.recv`` reports "no data yet" by raising, never by returning
nothing) and ends the I/O loop the way a closed plain socket does, with ``on_disconnected``; and a
close from any other thread shuts the TCP socket down under the I/O thread (no OpenSSL call) and
lets that thread close the TLS connection itself.
"""

from __future__ import annotations

import errno
import socket
import ssl
import threading
from typing import Any

import stomp
from stomp import exception as stomp_exception

_READ_FRAMES = "_BaseTransport__read_frames"
_RECV_BYTES = "_Transport__recv_bytes"

#: how long a close from another thread waits for the I/O thread to finish the connection
IO_THREAD_EXIT_S = 5.0


def install(conn: stomp.Connection12) -> bool:
    """Give ``conn``'s TLS transport an end-of-stream and a thread-safe close; ``False`` (and
    the connection left as it is) when stomp.py's internals are not the ones this knows."""
    transport: Any = conn.transport
    if not all(hasattr(transport, name) for name in (_READ_FRAMES, _RECV_BYTES, "io_thread", "blocking")):
        return False
    read_frames = getattr(transport, _READ_FRAMES)
    close = transport.disconnect_socket
    state = {"eof": False}

    def receive() -> bytes | None:
        sock = transport.socket
        if sock is None:
            return None
        try:
            data: bytes = sock.recv(getattr(transport, _RECV_BYTES))
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EINTR):
                raise stomp_exception.InterruptedException() from None
            state["eof"] = True  # reset, or a TLS alert: the stream is over
            return b""
        if not data and not transport.blocking:
            state["eof"] = True
        return data

    def read_frames_to_the_end() -> None:
        read_frames()  # the frames read before the end are delivered first (an ERROR, say)
        if state["eof"] and transport.running:
            raise stomp_exception.ConnectionClosedException()

    def disconnect_socket() -> None:
        io_thread = getattr(transport, "io_thread", None)
        if (io_thread is None or io_thread is threading.current_thread() or not io_thread.is_alive()
                or transport.blocking):
            close()
            return
        transport.running = False
        sock = transport.socket
        if sock is not None:
            try:
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # TCP only: no OpenSSL call here
            except OSError:
                pass
        io_thread.join(IO_THREAD_EXIT_S)
        if io_thread.is_alive():  # a thread stuck elsewhere: leave the socket to it
            return
        if transport.socket is not None:
            close()

    transport.receive = receive
    setattr(transport, _READ_FRAMES, read_frames_to_the_end)
    transport.disconnect_socket = disconnect_socket
    return True

