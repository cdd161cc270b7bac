"""The broker flavors the harness can run, by name.

Apart from :mod:`.broker_flavor` (the interface) because the flavors import the interface: a registry
there would import its own implementations.
"""

from __future__ import annotations

from clustermq.devtools.localcluster.artemis_flavor import ArtemisFlavor
from clustermq.devtools.localcluster.broker_flavor import BrokerFlavor
from clustermq.devtools.localcluster.classic_flavor import ClassicFlavor

FLAVORS: dict[str, type[BrokerFlavor]] = {
    ClassicFlavor.name: ClassicFlavor,
    ArtemisFlavor.name: ArtemisFlavor,
}


def get_flavor(name: str) -> BrokerFlavor:
    """The flavor called ``name`` (any case); ``ValueError`` naming the known ones otherwise."""
    key = name.strip().lower()
    if key in FLAVORS:
        return FLAVORS[key]()
    raise ValueError(f"unknown broker flavor '{name}'; known flavors: {', '.join(FLAVORS)}")
