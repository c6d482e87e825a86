"""The layout rules of the house, read from the source with ast.

- Imports run one way: schemas <- common <- models <- versions <- workers; common <- gateway; fleet
  (the operator's command line) on top of the product; fleet_dev (the tools of the source tree:
  stack, demo, benchmarks, chaos, training) above everything, and nothing of the product imports
  it; nothing imports tests.
- fleet imports the packages below it through their public surfaces only. A package's public
  surface is the `PUBLIC` table of its `__init__.py` (common/surface.py): `from models import
  ModelRegistry` is the way in, `from models.registry import ModelRegistry` is not. schemas and
  common are the shared base: every module of theirs is public. gateway's surface is its one
  admission, which the console shares.
- No import cycles between our modules, at any depth: imports inside functions and under
  TYPE_CHECKING count, and a surface's names count as imports of the modules they come from.
- Functions stay short (60 lines). Modules stay about one idea: 400 lines is the guideline, not a
  cut. A module past it that is one idea stays whole when it is listed in COHESIVE_MODULES with the
  reason; nothing goes past 700 lines, and a listed module back under 400 leaves the list.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

PACKAGES = ("schemas", "common", "models", "versions", "workers", "gateway", "fleet", "fleet_dev")
PRODUCT = PACKAGES[:-1]
MODULE_LINES_GUIDELINE = 400
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 60

# Which of our packages each package may import (besides itself).
ALLOWED_IMPORTS: dict[str, frozenset[str]] = {
    "schemas": frozenset(),
    "common": frozenset({"schemas"}),
    "models": frozenset({"schemas", "common"}),
    "versions": frozenset({"schemas", "common", "models"}),
    "gateway": frozenset({"schemas", "common"}),
    "workers": frozenset({"schemas", "common", "models", "versions"}),
    "fleet": frozenset({"schemas", "common", "models", "versions", "workers", "gateway"}),
    "fleet_dev": frozenset(PRODUCT),
}
# The packages fleet reaches only through the PUBLIC table of their __init__.py.
SURFACED = frozenset({"models", "versions", "workers", "gateway"})

# Modules past the guideline that are one idea, and why they stay whole (path -> reason).
COHESIVE_MODULES: dict[str, str] = {}

# Cycles known and owned elsewhere: the modules of the cycle -> who breaks it. Empty is the goal;
# an entry that no longer is a cycle fails, so the list only shrinks.
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (REPO_ROOT / package).rglob("*.py"))


def relative(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@dataclass(frozen=True)
class Imported:
    """One name an import statement brings in: `from module import name` (name None: `import module`)."""

    module: str
    name: str | None
    line: int

    @property
    def package(self) -> str:
        return self.module.split(".")[0]


def imports_of(tree: ast.Module, importer: str, is_package: bool) -> Iterator[Imported]:
    """Every import in the module, wherever it is written (functions, TYPE_CHECKING blocks);
    relative imports made absolute against `importer`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Imported(alias.name, None, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = importer.split(".") if is_package else importer.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join([*base, *([module] if module else [])])
            for alias in node.names:
                yield Imported(module, alias.name, node.lineno)


def long_functions(tree: ast.Module) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - start + 1
            if length > MAX_FUNCTION_LINES:
                yield f"{node.name} ({length} lines)", node.lineno


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def imports_in(path: Path) -> list[Imported]:
    return list(imports_of(parsed(path), module_name(path), path.name == "__init__.py"))


@cache
def surface(package: str) -> Mapping[str, str]:
    """The PUBLIC table of the package's __init__.py, as written (name -> "module[:attribute]")."""
    for node in parsed(REPO_ROOT.joinpath(*package.split("."), "__init__.py")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PUBLIC" for t in node.targets):
            table = ast.literal_eval(node.value)
            assert isinstance(table, dict)
            return table
    return {}


def size_violation(path: Path) -> str | None:
    lines = len(path.read_text().splitlines())
    name = relative(path)
    if lines > MAX_MODULE_LINES:
        return f"{name}: {lines} lines (at most {MAX_MODULE_LINES}, listed or not)"
    if lines > MODULE_LINES_GUIDELINE and name not in COHESIVE_MODULES:
        return (f"{name}: {lines} lines, past the {MODULE_LINES_GUIDELINE}-line guideline: split it where it holds "
                f"two ideas, or list it in COHESIVE_MODULES with the reason it is one")
    return None


def import_violations(path: Path) -> Iterator[str]:
    package = relative(path).split("/")[0]
    for imported in imports_in(path):
        where = f"{relative(path)}:{imported.line}"
        target = imported.package
        if target == "tests" or (target in PACKAGES and target != package
                                 and target not in ALLOWED_IMPORTS[package]):
            yield f"{where}: {package} imports {target}"
        elif package == "fleet" and target in SURFACED and not (
                imported.module == target and imported.name in surface(target)):
            shown = imported.module + (f".{imported.name}" if imported.name else "")
            yield f"{where}: fleet imports {shown}, not a name of {target}'s public surface ({target}/__init__.py)"


def module_violations(path: Path) -> list[str]:
    found = [f"{relative(path)}:{line}: function {what} (at most {MAX_FUNCTION_LINES})"
             for what, line in long_functions(parsed(path))]
    if (too_long := size_violation(path)) is not None:
        found.append(too_long)
    return found + list(import_violations(path))


def import_graph() -> dict[str, set[str]]:
    """Our module -> our modules it imports. `from a import b` is an import of a.b where that is a
    module, else of a; a surface name is an import of the module it comes from."""
    names = {module_name(path): path for path in modules()}

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in names:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        targets = {resolve(f"{i.module}.{i.name}" if i.name else i.module) for i in imports_in(path)}
        if path.name == "__init__.py":
            targets |= {resolve(where.partition(":")[0]) for where in surface(name).values()}
        graph[name] = {target for target in targets if target is not None and target != name}
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while (member := stack.pop()) != node:
                    component.add(member)
                    on_stack.discard(member)
                on_stack.discard(node)
                if component:
                    found.append(frozenset(component | {node}))
    return found


def test_the_packages_are_where_the_rules_look() -> None:
    assert all((REPO_ROOT / package / "__init__.py").is_file() for package in PACKAGES)
    assert len(modules()) > 100


@pytest.mark.parametrize("package", PACKAGES)
def test_cohesive_modules_short_functions_and_imports_that_run_one_way(package: str) -> None:
    found = [v for path in modules() if relative(path).split("/")[0] == package for v in module_violations(path)]
    assert not found, "\n".join(found)


def test_no_import_cycles_at_any_depth() -> None:
    found = set(cycles(import_graph()))
    unknown = [sorted(cycle) for cycle in found if cycle not in KNOWN_CYCLES]
    assert not unknown, "import cycles (imports inside functions included):\n" + "\n".join(map(str, unknown))
    gone = [sorted(cycle) for cycle in KNOWN_CYCLES if cycle not in found]
    assert not gone, f"no longer cycles: take them off KNOWN_CYCLES: {gone}"


def test_listed_cohesive_modules_exist_and_are_past_the_guideline() -> None:
    stale = [name for name in COHESIVE_MODULES
             if not (REPO_ROOT / name).is_file()
             or len((REPO_ROOT / name).read_text().splitlines()) <= MODULE_LINES_GUIDELINE]
    assert not stale, f"back under {MODULE_LINES_GUIDELINE} lines or gone: take them off COHESIVE_MODULES: {stale}"
    assert all(reason.strip() for reason in COHESIVE_MODULES.values())


@pytest.mark.parametrize("package", sorted(SURFACED))
def test_every_name_of_a_public_surface_is_there(package: str) -> None:
    table = surface(package)
    assert table, f"{package}/__init__.py has no PUBLIC table"
    loaded = importlib.import_module(package)
    missing = [name for name in table if getattr(loaded, name, None) is None]
    assert not missing, f"{package}'s surface names what its modules no longer hold: {missing}"
    assert sorted(table) == sorted(getattr(loaded, "__all__"))


def test_nothing_of_the_product_is_built_from_fleet_dev() -> None:
    assert all("fleet_dev" not in allowed for package, allowed in ALLOWED_IMPORTS.items() if package != "fleet_dev")


def test_the_checks_catch_what_they_look_for() -> None:
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    source = f"import fleet.cli\nfrom tests.paths import REPO_ROOT\ndef f():\n    from .sibling import y\n{body}\n"
    tree = ast.parse(source)
    found = list(imports_of(tree, "workers.cache.exact", is_package=False))
    assert [(i.module, i.name) for i in found] == [("fleet.cli", None), ("tests.paths", "REPO_ROOT"),
                                                    ("workers.cache.sibling", "y")]
    assert [what for what, _ in long_functions(tree)] == [f"f ({MAX_FUNCTION_LINES + 2} lines)"]
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
