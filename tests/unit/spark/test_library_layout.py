"""The Spark library (`spark_jobs/lakehouse`) is drawn by its folders: each sub-package is a layer, and a module
imports only from its own package or from a layer below it (LAYERS, lowest first; the packages of one layer do
not import each other). Every import of the library is at the top of its module, where a reader sees it: none
hides inside a function. No module reaches into another for a private (`_`) name, and none is over 500 lines.
Pure: nothing is imported; each checker is first shown to find what it looks for."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
LIBRARY = REPO / "spark_jobs" / "lakehouse"
MAX_LINES = 500
# The library's layers, lowest first: a package may import from its own modules and from every lower layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "base",
    ),  # no SparkSession, no I/O: names, types, schema file, configuration, DMS file contract, reports
    ("io",),  # the session, storage, the lease fence, Iceberg tables, the JVM
    ("dms",),  # reading DMS files into one change per key
    ("audit",),  # freshness and consistent points, the raw zone against the ledger
    ("apply",),  # full load, CDC, ledger and tombstones, quarantine, row history
    ("refine", "reconcile"),  # the refined zone; source <-> lake reconciliation
    ("maintenance",),  # keeps every table of the other layers healthy
    ("jobs",),  # the entry points: arguments, run, report
)
# Library modules allowed over MAX_LINES, each with its reason. An entry that gets under the limit fails the
# test too, so the list only shrinks.
OVERSIZED: dict[str, str] = {}


def module_name(library: Path, path: Path) -> str:
    """`lakehouse.apply.cdc` for `<library>/apply/cdc.py`, `lakehouse.apply` for its `__init__.py`."""
    parts = path.relative_to(library).with_suffix("").parts
    return ".".join(["lakehouse", *(parts[:-1] if parts[-1] == "__init__" else parts)])


def library_imports(path: Path) -> list[tuple[str, str, bool]]:
    """(module, name, at the top) of every `from lakehouse… import name` and `import lakehouse…` in a file, at
    any depth; at the top means in the module's own body (or an `if TYPE_CHECKING:` block there)."""
    found: list[tuple[str, str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.ImportFrom)
                and child.module
                and child.module.split(".")[0] == "lakehouse"
            ):
                found.extend((child.module, alias.name, top) for alias in child.names)
            elif isinstance(child, ast.Import):
                found.extend((a.name, "", top) for a in child.names if a.name.split(".")[0] == "lakehouse")
            nested = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef)
            visit(child, top and not nested)

    visit(ast.parse(path.read_text()), True)
    return found


def import_graph(library: Path) -> dict[str, set[str]]:
    """Library module → the library modules it imports (`from lakehouse.apply import cdc` names module
    `lakehouse.apply.cdc`; a package's name, its `__init__`)."""
    paths = sorted(library.rglob("*.py"))
    modules = {module_name(library, p) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        this = module_name(library, path)
        targets = set()
        for module, name, _ in library_imports(path):
            target = f"{module}.{name}" if f"{module}.{name}" in modules else module
            if target in modules and target != this:
                targets.add(target)
        graph[this] = targets
    return graph


def layer_of(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> tuple[int, str] | None:
    """(rank, package) of a library module (`lakehouse.<package>.…`); None outside every layer."""
    parts = module.split(".")
    for rank, packages in enumerate(layers):
        if len(parts) > 1 and parts[1] in packages:
            return rank, parts[1]
    return None


def crossings(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...] = LAYERS) -> list[str]:
    """Every import that leaves its package for one not below it (a higher layer, a peer of its own layer,
    or a module in no layer), as `importer -> imported`."""
    found = []
    for module, targets in sorted(graph.items()):
        mine = layer_of(module, layers)
        for target in sorted(targets):
            theirs = layer_of(target, layers)
            if mine is None or theirs is None:
                found.append(f"{module} -> {target} (outside every layer)")
            elif theirs[1] != mine[1] and theirs[0] >= mine[0]:
                found.append(f"{module} -> {target}")
    return found


def hidden_imports(library: Path) -> list[str]:
    """Every library import made inside a function or class, as `module: imported`."""
    return [
        f"{module_name(library, path)}: {module}.{name}".rstrip(".")
        for path in sorted(library.rglob("*.py"))
        for module, name, top in library_imports(path)
        if not top
    ]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk meets (empty: the graph is acyclic)."""
    found: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                found.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return found


def write_library(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_layer_rule_finds_an_import_upward_and_one_between_peers(tmp_path):
    """Given a library where low.a imports high.b (upward), left.c imports right.d (peers of one layer), and
    high.b imports low.a and its own high.e (allowed), When its crossings are looked for with the layers
    (low), (left, right), (high), Then exactly the upward and the peer imports are found."""
    layers = (("low",), ("left", "right"), ("high",))
    library = write_library(
        tmp_path,
        {
            "low/a.py": "from lakehouse.high.b import x\n",
            "left/c.py": "from lakehouse.right import d\n",
            "right/d.py": "",
            "high/b.py": "from lakehouse.low.a import y\nfrom lakehouse.high.e import z\n",
            "high/e.py": "",
        },
    )
    assert crossings(import_graph(library), layers) == [
        "lakehouse.left.c -> lakehouse.right.d",
        "lakehouse.low.a -> lakehouse.high.b",
    ]


def test_the_hidden_import_finder_finds_an_import_inside_a_function_and_none_at_the_top(tmp_path):
    """Given a module with a library import at its top, one under TYPE_CHECKING and one inside a function,
    When hidden imports are looked for, Then only the one inside the function is found."""
    library = write_library(
        tmp_path,
        {
            "low/a.py": (
                "from typing import TYPE_CHECKING\nfrom lakehouse.low.b import x\n"
                "if TYPE_CHECKING:\n    from lakehouse.low.c import y\n"
                "def main():\n    from lakehouse.high.d import z\n"
            )
        },
    )
    assert hidden_imports(library) == ["lakehouse.low.a: lakehouse.high.d.z"]


def test_the_cycle_finder_finds_a_cycle_through_an_import_inside_a_function(tmp_path):
    """Given a library where c imports a inside a function and a imports b, b imports c at the top,
    When its cycles are looked for, Then a → b → c → a is one; without c's import there is none."""
    library = write_library(
        tmp_path,
        {
            "p/a.py": "from lakehouse.p.b import x\n",
            "p/b.py": "from lakehouse.p import c\n",
            "p/c.py": "def main():\n    from lakehouse.p.a import _private\n",
        },
    )
    a, b, c = "lakehouse.p.a", "lakehouse.p.b", "lakehouse.p.c"
    assert cycles(import_graph(library)) == [[a, b, c, a]]
    (tmp_path / "p" / "c.py").write_text("def main():\n    pass\n")
    assert cycles(import_graph(library)) == []


def test_every_library_module_is_in_a_layer_and_imports_only_its_own_package_or_below():
    """Given the library's modules, When their imports are followed, Then each module lives in a layer's
    package, and none imports a higher layer's module or a peer package's (the folders draw the design)."""
    graph = import_graph(LIBRARY)
    assert [m for m in graph if m != "lakehouse" and layer_of(m) is None] == []
    assert crossings(graph) == []


def test_no_library_import_hides_inside_a_function():
    """Given the library's modules, When their imports are read, Then every library import is at its
    module's top: none dodges the layer rule, or hides a dependency, inside a function."""
    assert hidden_imports(LIBRARY) == []


def test_the_library_has_no_import_cycle():
    """Given the library's modules, When their imports are followed, Then no module leads back to itself."""
    assert cycles(import_graph(LIBRARY)) == []


def test_a_package_init_holds_only_its_docstring():
    """Given the library's packages, When their `__init__.py` are read, Then each holds its docstring alone:
    importing a package runs nothing and hides no re-export (a module's name says where it lives)."""
    busy = [
        str(path.relative_to(REPO))
        for path in sorted(LIBRARY.rglob("__init__.py"))
        if any(not isinstance(n, ast.Expr) for n in ast.parse(path.read_text()).body)
    ]
    assert busy == []


def test_no_library_or_tool_module_imports_a_private_name_of_the_library():
    """Given the library, the entry scripts and the tools, When their `from lakehouse… import` names are
    read, Then none is private: what another module needs is public."""
    files = sorted(
        [*LIBRARY.rglob("*.py"), *(REPO / "tools").rglob("*.py"), *(REPO / "spark_jobs").glob("*.py")]
    )
    private = [
        f"{path.relative_to(REPO)}: {module}.{name}"
        for path in files
        for module, name, _ in library_imports(path)
        if name.startswith("_") and name != "__future__"
    ]
    assert private == []


def oversized(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """File (relative to `root`) → its line count, for the Python files below `root` over `limit` lines."""
    counts = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in sorted(root.rglob("*.py"))}
    return {name: lines for name, lines in counts.items() if lines > limit}


def test_the_size_rule_finds_a_module_over_the_limit_and_only_that_one(tmp_path):
    """Given a library with a module of exactly 500 lines and one of 501 in a package (a trailing newline
    each), When the modules over 500 lines are looked for, Then only the 501-line one is found, with its count."""
    (tmp_path / "at_limit.py").write_text("x = 1\n" * 500)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "over.py").write_text("x = 1\n" * 501)
    (tmp_path / "notes.txt").write_text("x\n" * 900)
    assert oversized(tmp_path) == {"pkg/over.py": 501}


def test_no_library_module_is_over_500_lines_but_the_listed_ones():
    """Given the library's modules, When their lines are counted, Then none is over 500 lines except those
    listed with a reason in OVERSIZED, and each listed one is still over (else its entry goes)."""
    found = oversized(LIBRARY)
    assert {m: n for m, n in found.items() if m not in OVERSIZED} == {}
    assert sorted(set(OVERSIZED) - set(found)) == []
