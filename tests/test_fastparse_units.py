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
    # names whose lines the parser keeps parsed: each frame parses alike the second time too
    names = ["", "", "destination", "type", "priority:", "subscription:x"]
    for _ in range(3000):
        lines = [rng.choice(names) + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
                 for _ in range(rng.randint(0, 5))]
        raw = ("MESSAGE\n" + "\n".join(lines) + "\n\nbody").encode()
        theirs = stomp_utils.parse_frame(raw)
        for _ in range(2):
            ours = fastparse.parse_frame(raw)
            assert (ours is None) == (theirs is None), raw
            if ours is not None and theirs is not None:
                assert (ours.cmd, ours.headers, ours.body) == (theirs.cmd, theirs.headers, theirs.body), raw


def _delivery(n: int) -> bytes:
    return (f"MESSAGE\ndestination:/queue/orders\npersistent:true\nmessage-id:ID\\chost-1\\c{n}\n"
            f"timestamp:{1700000000000 + n}\nJMSXGroupID:g{n}\nack:{n}\n\nbody {n}").encode()


def test_deliveries_share_their_header_names_and_common_values() -> None:
    """A buffered message holds no copy of its header names, nor of the values every message of
    the queue repeats: strings shared by all deliveries (docs/design.md, "Reader memory")."""
    first, second = fastparse.parse_frame(_delivery(1)), fastparse.parse_frame(_delivery(2))
    assert first is not None and second is not None
    assert second.headers["message-id"] == "ID:host-1:2"
    for (name1, value1), (name2, value2) in zip(first.headers.items(), second.headers.items()):
        assert name1 is name2, name1
        if name1 in ("destination", "persistent"):
            assert value1 is value2, name1
        else:
            assert value1 != value2, name1


def test_the_parsed_lines_kept_are_bounded_and_sharing_outlives_the_bound() -> None:
    """A value that varies more than expected (a topic's subscriptions) fills the cache up to its
    bound and no further; lines past it still parse, and deliveries after it still share their
    strings (the test before this one passes in whatever state other tests left the cache)."""
    for n in range(fastparse._LINES_MAX + 200):
        frame = fastparse.parse_frame(f"MESSAGE\nsubscription:sub-{n}\n\n".encode())
        assert frame is not None and frame.headers == {"subscription": f"sub-{n}"}
        assert len(fastparse._LINES) <= fastparse._LINES_MAX
    test_deliveries_share_their_header_names_and_common_values()
    fastparse._LINES.update({f"type:t{n}": ("type", f"t{n}") for n in range(fastparse._LINES_MAX)})
    test_deliveries_share_their_header_names_and_common_values()  # a full cache: interned anyway
