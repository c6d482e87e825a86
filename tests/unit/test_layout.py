"""The layout rules of the house, read from the source with ast: small modules, short functions,
and imports that run one way (schemas <- common <- models <- versions <- workers; common <- gateway;
fleet on top; nothing imports tests)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

PACKAGES = ("schemas", "common", "models", "versions", "workers", "gateway", "fleet")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

# Which of our packages each package may import (besides itself); fleet may import them all.
ALLOWED_IMPORTS: dict[str, frozenset[str]] = {
    "schemas": frozenset(),
    "common": frozenset({"schemas"}),
    "models": frozenset({"schemas", "common"}),
    "versions": frozenset({"schemas", "common", "models"}),
    "gateway": frozenset({"schemas", "common"}),
    "workers": frozenset({"schemas", "common", "models", "versions"}),
    "fleet": frozenset({"schemas", "common", "models", "versions", "workers", "gateway"}),
}

def modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (REPO_ROOT / package).rglob("*.py"))


def relative(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


def imported_packages(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """(top-level package, line) of every absolute import in the module, wherever it is written."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            yield node.module.split(".")[0], node.lineno


def long_functions(tree: ast.Module) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - start + 1
            if length > MAX_FUNCTION_LINES:
                yield f"{node.name} ({length} lines)", node.lineno


def module_violations(path: Path) -> list[str]:
    text = path.read_text()
    tree = ast.parse(text, filename=str(path))
    package = relative(path).split("/")[0]
    found = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{relative(path)}: {lines} lines (at most {MAX_MODULE_LINES})")
    found += [f"{relative(path)}:{line}: function {what} (at most {MAX_FUNCTION_LINES})"
              for what, line in long_functions(tree)]
    for imported, line in imported_packages(tree):
        if imported == "tests" or (imported in PACKAGES and imported != package
                                   and imported not in ALLOWED_IMPORTS[package]):
            found.append(f"{relative(path)}:{line}: {package} imports {imported}")
    return found


def test_the_packages_are_where_the_rules_look() -> None:
    assert all((REPO_ROOT / package / "__init__.py").is_file() for package in PACKAGES)
    assert len(modules()) > 100


@pytest.mark.parametrize("package", PACKAGES)
def test_small_modules_short_functions_and_imports_that_run_one_way(package: str) -> None:
    found = [v for path in modules() if relative(path).split("/")[0] == package for v in module_violations(path)]
    assert not found, "\n".join(found)


def test_the_checks_catch_what_they_look_for() -> None:
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    tree = ast.parse(f"import fleet.cli\nfrom tests.paths import REPO_ROOT\ndef f():\n{body}\n")
    assert [package for package, _ in imported_packages(tree)] == ["fleet", "tests"]
    assert [what for what, _ in long_functions(tree)] == [f"f ({MAX_FUNCTION_LINES + 1} lines)"]
