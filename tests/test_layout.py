"""The package's shape, checked: layers, one place for flavor differences, module names that say
their role, private names kept inside their module, development tools out of the run-time import
graph, one error base, and a tree that speaks of the project rather than of how it was made.

These rules are what CONTRIBUTING.md describes; a change that breaks one fails here with the
module and the line, instead of eroding the layout a little at a time.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import clustermq
from clustermq import errors

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "connector" / "clustermq"
#: A module this long holds more than one job: split it by job, not to get under the number.
MAX_MODULE_LINES = 600

#: Layer of each top-level part of the package, low to high. A module imports only from its own
#: part or a lower layer; parts of the same layer never import each other. ``errors`` is the
#: bottom: every part raises its errors.
LAYERS: dict[str, int] = {
    "errors": 0, "version": 0,
    "paths": 1, "groups": 1, "logs": 1,
    "broker": 2,
    "options": 3,
    "read": 4, "write": 4,
    "source": 5, "pipelines": 5, "__init__": 5,
    "jobs": 6,
    "devtools": 7,
}


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def part_of(module: str) -> str:
    """``clustermq.read.stream`` -> ``read``; ``clustermq`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(module: str, path: Path) -> Iterator[tuple[int, str, list[str]]]:
    """(line, imported module, imported names) for every clustermq import, relative ones resolved."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "clustermq" or target.startswith("clustermq."):
                yield node.lineno, target, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("clustermq"):
                    yield node.lineno, alias.name, []


def known_modules() -> set[str]:
    return {name for name, _ in modules()}


def resolve_target(target: str, names: list[str], known: set[str]) -> list[str]:
    """The modules an import statement loads (``from clustermq.read import stream`` names one)."""
    found = [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
    return found or [target]


def test_imports_only_point_downwards() -> None:
    known = known_modules()
    problems = []
    for module, path in modules():
        own = part_of(module)
        for line, target, names in imports_of(module, path):
            for imported in resolve_target(target, names, known):
                other = part_of(imported)
                if other == own:
                    continue
                if own not in LAYERS or other not in LAYERS:
                    problems.append(f"{module}:{line}: {imported} (part not in LAYERS)")
                elif LAYERS[other] >= LAYERS[own] and not (module == "clustermq" and other == "source"):
                    problems.append(f"{module}:{line} ({own}) imports {imported} ({other})")
    assert not problems, "\n".join(problems)


def test_no_private_name_is_imported_across_modules() -> None:
    problems = [
        f"{module}:{line}: {target}.{name}"
        for module, path in modules()
        for line, target, names in imports_of(module, path)
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert not problems, "\n".join(problems)


def test_no_import_cycles() -> None:
    known = known_modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules():
        edges = graph.setdefault(module, set())
        for _, target, names in imports_of(module, path):
            for imported in resolve_target(target, names, known):
                if imported in known and imported != module and not module.startswith(imported + "."):
                    edges.add(imported)
    # a package's __init__ importing its own submodules is how packages export names
    for module in list(graph):
        graph[module] = {m for m in graph[module] if not m.startswith(module + ".")}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


FLAVOR = re.compile(r"classic|artemis", re.I)


def flavor_mentions(path: Path) -> Iterator[str]:
    """Code that names a broker flavor: identifiers containing one, or a string that is one.

    Prose (docstrings, comments, sentences in messages) may say "ActiveMQ Classic" to explain a
    choice; deciding by flavor belongs to the dialect objects.
    """
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.strip().lower() in ("classic", "artemis"):
                yield f"{node.lineno}: string {node.value!r}"
        elif isinstance(node, ast.Name) and FLAVOR.search(node.id):
            yield f"{node.lineno}: name {node.id}"
        elif isinstance(node, ast.Attribute) and FLAVOR.search(node.attr):
            yield f"{node.lineno}: attribute {node.attr}"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and FLAVOR.search(node.name):
            yield f"{node.lineno}: definition {node.name}"
        elif isinstance(node, ast.arg) and FLAVOR.search(node.arg):
            yield f"{node.lineno}: argument {node.arg}"
        elif isinstance(node, ast.alias) and FLAVOR.search(node.asname or node.name):
            yield f"{node.lineno}: import {node.name}"


def test_only_the_dialect_names_a_flavor() -> None:
    problems = []
    for module, path in modules():
        if ".broker.dialect" in module or module.endswith(".broker.dialect") or part_of(module) == "devtools":
            continue
        problems += [f"{module}:{m}" for m in flavor_mentions(path)]
    assert not problems, "\n".join(problems)


def test_the_flavor_check_finds_a_flavor_decision(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('def pick(flavor: str) -> bool:\n    return flavor == "artemis"\n'
                      'def _is_classic() -> None:\n    """ActiveMQ Classic: prose is fine."""\n')
    found = list(flavor_mentions(sample))
    assert any("'artemis'" in f for f in found) and any("_is_classic" in f for f in found)
    assert not any("prose" in f for f in found)


def test_module_basenames_are_unique() -> None:
    """A file name says what the module does, so two modules never share one: ``tls.py`` in three
    folders meant three different things, and a traceback or an editor tab named none of them."""
    seen: dict[str, list[str]] = {}
    for module, path in modules():
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(module)
    clashes = {name: found for name, found in seen.items() if len(found) > 1}
    assert not clashes, "\n".join(f"{name}: {', '.join(found)}" for name, found in sorted(clashes.items()))


def test_no_module_is_too_long_to_hold_one_job() -> None:
    """A guard, not a target (:data:`MAX_MODULE_LINES`): the seams are the rules above and below."""
    long = [f"{module}: {n} lines" for module, path in modules()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, "\n".join(long)


#: underscore attributes that are public API of the standard library (named tuples, os._exit)
STDLIB_UNDERSCORE = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults", "_exit"})
#: the parts whose internals the connector's two paths must not reach into across modules
PRIVATE_CHECKED_PARTS = ("read", "write")


def defined_private_names(tree: ast.AST) -> set[str]:
    """Underscore names a module defines itself: functions, classes, attributes set on ``self``
    or ``cls``, class-level fields (dataclass fields included)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_reaches(path: Path) -> Iterator[str]:
    """``obj._name`` where ``obj`` is not ``self``/``cls`` and ``_name`` is not this module's own:
    reaching into another module's object past its interface."""
    tree = ast.parse(path.read_text())
    own = defined_private_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in own or name in STDLIB_UNDERSCORE:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        yield f"{node.lineno}: {ast.unparse(node)}"


def test_read_and_write_reach_no_private_name_across_modules() -> None:
    problems = [
        f"{module}:{found}"
        for module, path in modules()
        if part_of(module) in PRIVATE_CHECKED_PARTS
        for found in private_reaches(path)
    ]
    assert not problems, "\n".join(problems)


def test_the_private_check_finds_a_reach_into_another_module(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("class Mine:\n    def __init__(self) -> None:\n        self._own = 1\n\n"
                      "def use(a: Mine, link: object) -> object:\n"
                      "    return a._own, link._conn, link.__class__, self_._x\n")
    found = list(private_reaches(sample))
    assert any("link._conn" in f for f in found) and any("self_._x" in f for f in found)
    assert not any("a._own" in f or "__class__" in f for f in found)


def import_time_imports(tree: ast.Module) -> Iterator[ast.stmt]:
    """The import statements that run when the module is imported: not those inside a function
    (run when called) nor under ``if TYPE_CHECKING:`` (never run)."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        elif isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            pending.extend(node.orelse)
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                pending.extend(getattr(node, field, []))


def test_import_time_imports_skip_functions_and_type_checking() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n"
                     "try:\n    import b\nexcept ImportError:\n    import c\n"
                     "def f() -> None:\n    import d\n")
    assert sorted(ast.unparse(n) for n in import_time_imports(tree)) == [
        "from typing import TYPE_CHECKING", "import b", "import c"]


BENCH = "clustermq.devtools.bench"


def test_only_the_bench_imports_the_bench_at_import_time() -> None:
    """The benchmark is development tooling (Spark sessions, plots): ``clustermq bench`` loads it
    when it runs, so no other command, and nothing at run time, pays for importing it."""
    problems = []
    for module, path in modules():
        if module == BENCH or module.startswith(BENCH + "."):
            continue
        at_import = {node.lineno for node in import_time_imports(ast.parse(path.read_text()))}
        for line, target, names in imports_of(module, path):
            loaded = [target] + [f"{target}.{name}" for name in names]
            if line in at_import and any(t == BENCH or t.startswith(BENCH + ".") for t in loaded):
                problems.append(f"{module}:{line}: {target} {', '.join(names)}")
    assert not problems, "\n".join(problems)


def test_every_error_is_exported_under_one_base() -> None:
    assert errors.__all__
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.ClusterMQError), name
        assert getattr(clustermq, name) is cls, f"clustermq.{name} is not exported"
        assert name in clustermq.__all__


def test_every_error_a_user_can_catch_is_documented() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [name for name in errors.__all__ if f"`{name}`" not in readme]
    assert not missing, f"README names no `{missing}`"


def test_every_error_class_lives_in_errors() -> None:
    """An exception class defined elsewhere would escape the documented hierarchy."""
    problems = []
    for module, path in modules():
        if module == "clustermq.errors" or part_of(module) == "devtools":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b) for b in node.bases}
                if node.name.endswith(("Error", "Exception")) or bases & {
                    "Exception", "ValueError", "RuntimeError", "ConnectionError", "OSError"
                }:
                    problems.append(f"{module}:{node.lineno}: {node.name}")
    assert not problems, "\n".join(problems)


HISTORY = re.compile(r"\bsession [0-9]+\b|\bcc[0-9]+\b|\bissues? #?[0-9]+\b|\.\./shared/", re.I)


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    suffixes = {".py", ".md", ".toml", ".sh", ".tmpl", ".conf", ".xml", ".cfg", ".txt", ""}
    return [ROOT / p for p in out.stdout.splitlines()
            if Path(p).suffix in suffixes and (ROOT / p).is_file() and not p.startswith(".ci/")]


def test_the_tree_speaks_of_the_project_not_of_its_history() -> None:
    """Sessions, CI run ids and issue numbers belong in git history, not in files."""
    problems = []
    for path in tracked_text_files():
        if path == Path(__file__).resolve():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if HISTORY.search(line):
                problems.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not problems, "\n".join(problems)
