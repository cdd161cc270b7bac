"""The connector's STOMP frame parser gives what stomp.py's own parser gives, on every shape of
frame a broker may send; and it is installed on the connections the connector opens."""

from __future__ import annotations

import pytest
import stomp
from stomp import utils as stomp_utils

from clustermq.broker import fastparse

FRAMES = [
    pytest.param(b"MESSAGE\ndestination:/queue/q\nmessage-id:ID:h-1:1:1:1:7\nack:ID:h-5:7\n"
                 b"subscription:clustermq-0\ncontent-length:5\n\nhello", id="plain"),
    pytest.param(b"MESSAGE\ncontent-length:4\nJMSXGroupID:g1\n\n\x00\x01\n\n", id="binary body"),
    pytest.param(b"MESSAGE\nkey:first\nkey:second\n\n", id="repeated header, first wins"),
    pytest.param(b"MESSAGE\nurl:http://h:1/x\nempty:\n:novalue\nnocolon\n\nb", id="colons, odd lines"),
    pytest.param(b"MESSAGE\nesc\\cape:a\\nb\\\\c\\cd\n\nbody", id="escapes"),
    pytest.param(b"MESSAGE\nmessage-id:ID\\chost-1-2\\c1\\c7\nack:ID\\chost-5\\c7\n\nb", id="escaped colons"),
    pytest.param(b"MESSAGE\na\\\\cb:\\\\\\c\\x\\\nk\\:cv\n\n", id="backslash before c, unknown"),
    pytest.param(b"MESSAGE\r\ndestination:/queue/q\r\nx:y\r\n\r\nbody\n\nmore", id="CRLF"),
    pytest.param(b"\n\nMESSAGE\nx:y\n\nbody", id="leading EOLs"),
    pytest.param(b"\nMESSAGE\nx:y\n\nbody", id="one leading EOL"),
    pytest.param(b"RECEIPT\nreceipt-id:r-1", id="no blank line"),
    pytest.param("MESSAGE\nnäme:välue ✓\n\nbödy".encode(), id="UTF-8"),
    pytest.param(b"MESSAGE\nbad:\xff\xfe\n\n", id="invalid UTF-8"),
    pytest.param(b"CONNECTED\nversion:1.2\nheart-beat:1000,1000\n\n", id="connected"),
]


@pytest.mark.parametrize("raw", FRAMES)
def test_fast_parser_agrees_with_stomp_py(raw: bytes) -> None:
    ours, theirs = fastparse.parse_frame(raw), stomp_utils.parse_frame(raw)
    if theirs is None:
        assert ours is None
        return
    assert ours is not None
    assert (ours.cmd, ours.headers, ours.body) == (theirs.cmd, theirs.headers, theirs.body)


def test_installed_on_a_stomp_py_connection() -> None:
    conn = stomp.Connection12([("127.0.0.1", 1)], auto_decode=False)
    assert fastparse.install(conn)
    assert "_BaseTransport__read_frames" in vars(conn.transport)  # this object only, not the class
    assert "_BaseTransport__read_frames" not in vars(stomp.Connection12([("127.0.0.1", 1)]).transport)


def test_fast_parser_agrees_on_random_header_text() -> None:
    """Header lines drawn from the characters that matter (colons, backslashes, escape letters,
    CR, non-ASCII), seeded: every frame parses as stomp.py parses it."""
    import random

    rng = random.Random(7)
    alphabet = ["a", "c", "n", "r", "x", ":", "\\", "\\c", "\\\\", "\r", "é", " "]
    for _ in range(3000):
        lines = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
                 for _ in range(rng.randint(0, 5))]
        raw = ("MESSAGE\n" + "\n".join(lines) + "\n\nbody").encode()
        ours, theirs = fastparse.parse_frame(raw), stomp_utils.parse_frame(raw)
        assert (ours is None) == (theirs is None), raw
        if ours is not None and theirs is not None:
            assert (ours.cmd, ours.headers, ours.body) == (theirs.cmd, theirs.headers, theirs.body), raw
