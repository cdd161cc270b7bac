"""Options: declared once, parsed once, validated before anything is consumed, typed afterwards.

Spark hands a Python data source its options lower-cased with string values. Every option the
connector knows is declared once in :mod:`clustermq.options.table` (kind, typed default,
limits, meaning); :mod:`~clustermq.options.parsed` reads them into :class:`ReadOptions` and
:class:`WriteOptions` for the rest of the code.
"""

from clustermq.errors import OptionError
from clustermq.options.common_options import parse_connection_options
from clustermq.options.parsed import ReadOptions, WriteOptions
from clustermq.options.table import (
    ACK_MODES,
    FLAVORS,
    LOAD_BALANCING_POLICIES,
    OPTIONS,
    READ_MODES,
    SPEC,
    known_options,
)
from clustermq.options.tls_options import parse_tls

__all__ = [
    "ACK_MODES",
    "FLAVORS",
    "LOAD_BALANCING_POLICIES",
    "OPTIONS",
    "READ_MODES",
    "SPEC",
    "OptionError",
    "ReadOptions",
    "WriteOptions",
    "known_options",
    "parse_connection_options",
    "parse_tls",
]
