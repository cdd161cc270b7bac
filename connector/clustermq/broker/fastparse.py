"""A faster parser for received STOMP frames, installed on every connection the connector opens.

stomp.py parses each frame's headers with one regular-expression match and two ``re.sub``
unescape calls per header line. Draining a queue, that was half of the reader process's CPU
(sampled with py-spy: 49 % of a Classic drain's samples, about 40 µs of ~85 µs per message).
Headers that contain no backslash need no unescaping, and a line splits at its first colon, so
a frame is parsed with ``str.split``/``str.partition``, and only a header that holds a
backslash is unescaped, with one precompiled pattern (ActiveMQ Classic escapes the colons of
every message id, so that is most frames). A frame with CRLF line ends is handed to stomp.py's
own parser. The result is what stomp.py produces (``tests/test_fastparse_units.py`` compares
both on every shape of frame).

Header names are interned, and a line of a header whose value most messages share is parsed
once: the reader buffers up to ``prefetchPerNode`` messages per node, and their own copies of
those strings were a third of a buffered message's memory (docs/design.md, "Reader memory").

stomp.py 9 reads and splits frames in ``BaseTransport.__read_frames``, which calls the module's
``parse_frame``; :func:`install` replaces that one method on a transport object (the socket
reading, heart-beats and listener calls stay stomp.py's). If a stomp.py release renames it,
``install`` leaves the connection as it is.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from stomp import utils as stomp_utils
from stomp.transport import BaseTransport

_READ = "_BaseTransport__read"
_IS_EOL = "_BaseTransport__is_eol"
_AUTO_DECODE = "_BaseTransport__auto_decode"
_READ_FRAMES = "_BaseTransport__read_frames"

#: headers whose value most messages of a queue share (the queue, the subscription, the delivery
#: mode): a line of one of them is parsed once, into an interned name and value
_SHARED_VALUES = frozenset({"destination", "subscription", "persistent", "priority", "redelivered",
                            "content-type", "type"})
#: those lines, parsed; bounded, since a value may still vary (a topic's subscriptions, a type):
#: when full it is emptied, and the values stay interned either way
_LINES: dict[str, tuple[str, str]] = {}
_LINES_MAX = 1024

#: STOMP 1.2 header escapes; an unknown one stays as it is, as stomp.py leaves it
_ESCAPE = re.compile(r"\\.")
_UNESCAPED = {"\\r": "\r", "\\n": "\n", "\\c": ":", "\\\\": "\\"}


def _unescape(match: re.Match[str]) -> str:
    escaped = match.group(0)
    return _UNESCAPED.get(escaped, escaped)


def parse_frame(frame: bytes) -> stomp_utils.Frame | None:
    """The frame's command, headers (first occurrence wins) and body, as stomp.py parses it."""
    end = frame.find(b"\n\n")
    if end < 0:
        return stomp_utils.parse_frame(frame)
    preamble_bytes = frame[:end]
    if b"\r" in preamble_bytes:
        return stomp_utils.parse_frame(frame)  # CRLF line ends
    escaped = b"\\" in preamble_bytes
    lines = preamble_bytes.decode("utf-8", errors="replace").split("\n")
    first = 0
    while first < len(lines) and not lines[first]:
        first += 1
    if first >= len(lines):
        return None
    headers: dict[str, str] = {}
    for line in lines[first + 1:]:
        known = _LINES.get(line)
        if known is not None:
            key, value = known
        else:
            key, colon, value = line.partition(":")
            if not (colon and key):
                continue
            if escaped and "\\" in line:
                if line.count("\\") == line.count("\\c"):  # only colons (Classic's message ids)
                    key, value = key.replace("\\c", ":"), value.replace("\\c", ":")
                else:
                    key, value = _ESCAPE.sub(_unescape, key), _ESCAPE.sub(_unescape, value)
            key = sys.intern(key)
            if key in _SHARED_VALUES:
                value = sys.intern(value)
                if len(_LINES) >= _LINES_MAX:  # values vary more than expected: start over,
                    _LINES.clear()  # so the lines that do repeat come back
                _LINES[line] = (key, value)
        if key not in headers:
            headers[key] = value
    return stomp_utils.Frame(lines[first], headers, frame[end + 2:])


def _read_frames(transport: Any) -> None:
    """``BaseTransport.__read_frames`` with :func:`parse_frame`: same reading, same calls."""
    for raw in getattr(transport, _READ)():
        if getattr(transport, _IS_EOL)(raw):
            parsed: stomp_utils.Frame | None = stomp_utils.HEARTBEAT_FRAME
        else:
            parsed = parse_frame(raw)
        if parsed is None:
            continue
        if getattr(transport, _AUTO_DECODE):
            parsed.body = stomp_utils.decode(parsed.body)
        transport.process_frame(parsed, raw)


def install(conn: Any) -> bool:
    """Parse ``conn``'s received frames with :func:`parse_frame`; False where stomp.py's
    transport does not have the methods this relies on (then it keeps its own parser)."""
    transport = getattr(conn, "transport", None)
    if not isinstance(transport, BaseTransport) or not all(
        hasattr(transport, name) for name in (_READ, _IS_EOL, _AUTO_DECODE, _READ_FRAMES)
    ):
        return False
    setattr(transport, _READ_FRAMES, lambda: _read_frames(transport))
    return True
