"""The house's contract (docs/DEVELOPING.md, "The house"): each layer imports only its own layer and the
layers listed before it, no import cycle between modules, and every module of ``src/dlscope`` in a layer.

The import graph comes from the source (an AST walk; nothing is imported): every ``import`` and
``from ... import`` anywhere in a file, lazy ones inside functions included, relative ones resolved, and
``importlib.import_module("dlscope...")`` with a literal name. ``from pkg import name`` is an edge to
``pkg.name`` when that is a module, else to ``pkg`` (the package's ``__init__``, which is what runs).
Only the module named counts, not the parent packages Python also initializes on the way.

Checks (:func:`violations`, plain functions over graphs ``module -> set of modules``):

* Layers (:data:`LAYERS`, the table of docs/DEVELOPING.md): no import of a module of a later layer.
  Every edge counts, those under ``if TYPE_CHECKING:`` too (a type from a higher layer is a dependency
  on it all the same). Every module must be in a layer, and every name in the map must still exist.
* Types, not work (:data:`MAY_NOT_RUN`): render may take only classes (result types) from analysis and
  advice, and the front doors only classes from store, capture, analysis and advice; importing a
  module, a function or a registry (anything not CamelCase) from there counts as running it. The name
  is the judge, so a use case that is a class goes unseen: this catches the functions, not every case.
* Cycles: a strongly connected component of more than one module fails. Imports under
  ``if TYPE_CHECKING:`` are left out here: they never run, so they cannot make one module's import wait on
  another's (a collector's ``session: Session`` annotation, while the session holds its collectors).
  A package ``__init__`` counts as a module like any other: one that imports its own submodules (a
  registry, as ``capture/__init__``) is in a cycle only if such a submodule imports the package back
  *and* is reached from it, which is a real cycle.
* No SQL in advice: a module of ``dlscope.advice`` with ``SELECT`` in a string (f-strings included), a call of
  a profile's query helpers (``.rows()``, ``.scalar()``, ``.execute()`` ...) or of a ``*_sql`` fragment.

What still breaks these is listed in :data:`KNOWN_VIOLATIONS`, which may only shrink.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "dlscope"

Graph = dict[str, set[str]]

# The house, in order: a module may import modules of its own layer and of the layers before it. A name
# stands for the module and everything under it; the package root ``dlscope`` stands for itself alone.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vocabulary", ("dlscope.vocabulary", "dlscope.errors")),
    ("store", ("dlscope.store",)),
    ("capture and importers", ("dlscope.capture", "dlscope.importers")),
    ("analysis", ("dlscope.analysis",)),
    ("advice", ("dlscope.advice",)),
    ("render", ("dlscope.render",)),
    ("application", ("dlscope.application",)),
    (
        "front doors",
        ("dlscope.cli", "dlscope.api", "dlscope.notebook", "dlscope.integrations", "dlscope.__main__", "dlscope"),
    ),
)
_LAYER_OF_NAME: dict[str, int] = {name: i for i, (_, names) in enumerate(LAYERS) for name in names}
STORE, CAPTURE, ANALYSIS, ADVICE, RENDER, APPLICATION, FRONT_DOORS = range(1, 8)

# What a layer may import types from (to format them, to annotate with them) but never run: render
# formats finished results and runs no analysis and no advice; the front doors are thin over the
# application layer (they run it, the renderers and each other), which alone strings the layers together.
MAY_NOT_RUN: dict[int, frozenset[int]] = {
    RENDER: frozenset({ANALYSIS, ADVICE}),
    FRONT_DOORS: frozenset({STORE, CAPTURE, ANALYSIS, ADVICE}),
}

# Violations that remain, each with the step that takes it out. The list only shrinks: the test fails on a
# violation not listed here and on an entry that no longer occurs. Issue 37 emptied it.
KNOWN_VIOLATIONS: frozenset[str] = frozenset()


# ---- the graph ---------------------------------------------------------------------------------------


def module_name(path: Path, src: Path = SRC) -> str:
    """``src/dlscope/a/b.py`` -> ``dlscope.a.b``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every import node (and ``import_module`` call) in ``tree`` with whether it sits under
    ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports_in(child, True)
            for child in node.orelse:
                yield from _imports_in(child, type_only)
            continue
        yield from _imports_in(node, type_only)


def _imports_in(node: ast.AST, type_only: bool) -> Iterator[tuple[ast.AST, bool]]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node, type_only
    elif isinstance(node, ast.Call):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
            yield node, type_only
    if not isinstance(node, (ast.Import, ast.ImportFrom)):
        yield from _imports(node, type_only)


def _is_type_name(name: str) -> bool:
    """A class (``ProfileData``, ``Finding``): CamelCase. Functions, modules and registries
    (``summarize``, ``gpu_metrics``, ``REPORTS``) are not."""
    return name[:1].isupper() and not name.isupper()


def _targets(module: str, is_package: bool, node: ast.AST, modules: set[str]) -> Iterable[tuple[str, bool]]:
    """The dlscope modules an import node names (resolved, relative ones against ``module``), each with
    whether the import brings in something that runs (a module, a function, a registry: anything but a
    class)."""
    named: list[tuple[str, bool]]
    if isinstance(node, ast.Import):
        named = [(a.name, True) for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            parent = ".".join(base + ([node.module] if node.module else []))
        else:
            parent = node.module or ""
        named = [
            (f"{parent}.{a.name}", True) if f"{parent}.{a.name}" in modules else (parent, not _is_type_name(a.name))
            for a in node.names
        ]
    else:  # importlib.import_module("...")
        assert isinstance(node, ast.Call)
        value = node.args[0].value  # type: ignore[attr-defined]
        named = [(value, True)] if isinstance(value, str) and not value.startswith(".") else []
    for name, runs in named:
        if name != "dlscope" and not name.startswith("dlscope."):
            continue
        while name not in modules and "." in name:  # `import dlscope.a.b.attr`-like: the module part
            name = name.rsplit(".", 1)[0]
        if name in modules and name != module:
            yield name, runs


_SQL = re.compile(r"\bSELECT\b")


# what a module calls to query a profile: ProfileData's query helpers, DuckDB's connection, and
# analysis's SQL fragments (functions named *_sql)
_QUERY_CALLS = {"rows", "scalar", "table", "execute", "sql", "shared_table", "shared_islands"}


def _holds_sql(tree: ast.AST) -> bool:
    """Whether the module holds SQL: a string (f-strings included) with ``SELECT``, a call of a
    profile's query helpers (``data.rows(...)``, ``con.execute(...)``), or of a ``*_sql`` fragment."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and _SQL.search(n.value):
            return True
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if (isinstance(f, ast.Attribute) and name in _QUERY_CALLS) or name.endswith("_sql"):
                return True
    return False


@dataclass
class Imports:
    """The import graphs of a source tree: module -> the dlscope modules it imports."""

    every: Graph  # every import
    running: Graph  # the imports that run: those under ``if TYPE_CHECKING:`` left out
    runs: Graph  # the running imports that bring in something that runs (not only classes)
    sql: set[str] = field(default_factory=set)  # the modules holding SQL text


def import_graphs(src: Path = SRC) -> Imports:
    files = {module_name(p, src): p for p in sorted(src.rglob("*.py"))}
    modules = set(files)
    out = Imports({m: set() for m in files}, {m: set() for m in files}, {m: set() for m in files})
    for m, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        if _holds_sql(tree):
            out.sql.add(m)
        for node, type_only in _imports(tree):
            for target, runs in _targets(m, path.name == "__init__.py", node, modules):
                out.every[m].add(target)
                if not type_only:
                    out.running[m].add(target)
                    if runs:
                        out.runs[m].add(target)
    return out


# ---- the checks (plain functions over a graph) -------------------------------------------------------


def layer_of(module: str) -> int | None:
    """The layer's index, by the longest name of ``LAYERS`` that is the module or a package above it
    (the root ``dlscope`` only for itself); None when it is in no layer."""
    name = module
    while True:
        if name in _LAYER_OF_NAME and (name != "dlscope" or module == "dlscope"):
            return _LAYER_OF_NAME[name]
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]


def unmapped(graph: Graph) -> set[str]:
    """Modules of the graph (importing or imported) that are in no layer."""
    return {m for m in set(graph).union(*graph.values()) if layer_of(m) is None}


def upward_imports(graph: Graph) -> set[str]:
    """``"importer -> imported"`` for each import of a module from a later layer than the importer's."""
    out = set()
    for m, targets in graph.items():
        own = layer_of(m)
        for t in targets:
            theirs = layer_of(t)
            if own is not None and theirs is not None and theirs > own:
                out.add(f"{m} -> {t}")
    return out


def ran_across(runs: Graph) -> set[str]:
    """``"importer runs imported"`` for each import, by a layer of :data:`MAY_NOT_RUN`, of something
    that runs (a function, a module, a registry; not a class) from a layer it may only take types from."""
    out = set()
    for m, targets in runs.items():
        own = layer_of(m)
        barred = MAY_NOT_RUN.get(own, frozenset()) if own is not None else frozenset()
        out |= {f"{m} runs {t}" for t in targets if layer_of(t) in barred}
    return out


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (each sorted), by Tarjan's
    algorithm without recursion."""
    nodes = sorted(set(graph).union(*graph.values()))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def violations(
    graph: Graph, running: Graph | None = None, runs: Graph | None = None, sql: Iterable[str] = ()
) -> set[str]:
    """Everything that breaks the house: ``"a -> b"`` (an upward import), ``"a runs b"`` (over ``runs``),
    ``"cycle: a, b, ..."`` (over ``running``, the imports that run, when given, else ``graph``),
    ``"unmapped: m"`` and ``"sql in advice: m"`` (of the modules ``sql`` names)."""
    out = upward_imports(graph)
    out |= ran_across(runs or {})
    out |= {"cycle: " + ", ".join(c) for c in cycles(graph if running is None else running)}
    out |= {f"unmapped: {m}" for m in unmapped(graph)}
    out |= {f"sql in advice: {m}" for m in sql if layer_of(m) == ADVICE}
    return out


# ---- the tests --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def imports() -> Imports:
    return import_graphs()


def _violations(i: Imports) -> set[str]:
    return violations(i.every, i.running, i.runs, i.sql)


def test_the_house_holds(imports: Imports) -> None:
    found = _violations(imports)
    new = sorted(found - KNOWN_VIOLATIONS)
    gone = sorted(KNOWN_VIOLATIONS - found)
    assert not new, "imports that break the house (docs/DEVELOPING.md):\n" + "\n".join(new)
    assert not gone, "gone, take them out of KNOWN_VIOLATIONS:\n" + "\n".join(gone)
    stale = [n for _, names in LAYERS for n in names if not any(m == n or m.startswith(n + ".") for m in imports.every)]
    assert not stale, f"LAYERS names modules that are no more: {stale}"


def test_the_checker_reports_what_is_planted(imports: Imports) -> None:
    every = {m: set(t) for m, t in imports.every.items()}
    running = {m: set(t) for m, t in imports.running.items()}
    runs = {m: set(t) for m, t in imports.runs.items()}
    every["dlscope.store.reader"].add("dlscope.advice")  # upward: store -> advice (a type only)
    for a, b in (
        ("dlscope.vocabulary.version", "dlscope.vocabulary.collectives"),  # a cycle in one layer
        ("dlscope.vocabulary.collectives", "dlscope.vocabulary.version"),
    ):
        every[a].add(b)
        running[a].add(b)
    every["dlscope.render.nowhere"] = {"dlscope.render"}  # a new module, in a layer
    every["dlscope.nowhere"] = set()  # in none
    for g in (every, running, runs):  # render running analysis
        g["dlscope.render.tables"].add("dlscope.analysis.core.summary")
    sql = imports.sql | {"dlscope.advice.rule", "dlscope.analysis.core.summary"}  # SQL in a rule's base: not allowed
    found = violations(every, running, runs, sql) - _violations(imports)
    planted = {
        "dlscope.store.reader -> dlscope.advice",
        "cycle: dlscope.vocabulary.collectives, dlscope.vocabulary.version",
        "unmapped: dlscope.nowhere",
        "dlscope.render.tables runs dlscope.analysis.core.summary",
        "sql in advice: dlscope.advice.rule",
    }
    # exactly these over a clean graph; over a broken one a planted edge may also grow a real cycle
    assert planted <= found
    assert all(f.startswith("cycle: ") for f in found - planted)


def test_the_graph_sees_every_kind_of_import(imports: Imports) -> None:
    """The walk finds lazy imports, resolves relative ones, and keeps type-only ones out of the
    running graph (so that a test of the house cannot pass by missing imports)."""
    every, running, runs = imports.every, imports.running, imports.runs
    assert "dlscope.capture.finalize" in running["dlscope.capture.session"]  # inside a method
    assert "dlscope.vocabulary.version" in every["dlscope.render.html.diff"]  # `from ...vocabulary.version`
    assert "dlscope.notebook" in every["dlscope"]  # `from . import notebook`, inside __getattr__
    assert "dlscope.capture.session" in every["dlscope.capture.base"]  # under TYPE_CHECKING
    assert "dlscope.capture.session" not in running["dlscope.capture.base"]
    # `from ..analysis.summary import Summary` brings a type; `from ..store import db`, a module
    assert "dlscope.analysis.core.summary" in running["dlscope.render.terminal"]
    assert "dlscope.analysis.core.summary" not in runs["dlscope.render.terminal"]
    assert "dlscope.store.db" in runs["dlscope.render.raw"]
    assert layer_of("dlscope") == layer_of("dlscope.cli.summary") == len(LAYERS) - 1
    assert layer_of("dlscope.errors") == layer_of("dlscope.vocabulary.version") == 0
    assert layer_of("dlscope.errorsx") is None


def test_cycles_finds_each_component() -> None:
    g: Graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"f"}}
    assert cycles(g) == [["a", "b", "c"], ["d", "e"]]
