"""Argument types shared by the development commands (``clustermq``, the bench).

A number that must be positive is refused by argparse itself, naming the option and its unit,
before a cluster is started or a message sent.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def positive_number(option: str, unit: str) -> Callable[[str], float]:
    """An argparse ``type`` that takes a positive number and refuses anything else by name."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = 0.0
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{option} must be a positive number of {unit}, got {text!r}")
        return value

    return parse
