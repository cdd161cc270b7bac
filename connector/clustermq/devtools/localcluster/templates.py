"""Fill ``{{name}}`` placeholders in the broker config templates (``templates/<flavor>/``).

The templates are package data, read with :mod:`importlib.resources`, so ``clustermq cluster
up`` works from a wheel as well as from a checkout: nothing is looked up relative to a
repository.

Deliberately tiny and strict: a placeholder without a value is an error, so a template edit that
introduces a new knob cannot silently produce a config containing a literal ``{{...}}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from xml.sax.saxutils import escape

from clustermq.errors import NotInstalled

#: The package whose ``templates/`` folder holds the templates (package data in the wheel).
TEMPLATE_PACKAGE = "clustermq.devtools.localcluster"
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def xml_attr(value: object) -> str:
    """Escape a value for use inside a double-quoted XML attribute."""
    return escape(str(value), {'"': "&quot;"})


def render(text: str, values: Mapping[str, object]) -> str:
    """Substitute every ``{{name}}`` in ``text``; raise ``KeyError`` naming missing values."""
    missing = sorted({m.group(1) for m in _PLACEHOLDER.finditer(text)} - set(values))
    if missing:
        raise KeyError(f"template values missing: {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), text)


def load_template(flavor: str, name: str) -> str:
    """The text of the package's ``templates/<flavor>/<name>``.

    :class:`NotInstalled` when it is not there: an installation that lost its package data
    (a wheel built without it), which a reinstall fixes, not a code change.
    """
    resource = resources.files(TEMPLATE_PACKAGE) / "templates" / flavor / name
    try:
        return resource.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotInstalled(
            f"the broker config template {flavor}/{name} is missing from the installed package "
            f"({TEMPLATE_PACKAGE}: templates/); reinstall clustermq (pip install --force-reinstall clustermq)"
        ) from None


def write_file(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``text`` to ``path`` with ``mode`` (configs hold the cluster password)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as handle:
        handle.write(text)
    tmp.chmod(mode)
    tmp.replace(path)
