"""Each role installs what it runs, and no more of the heavy libraries.

pyproject.toml's extras are the roles: `gateway`, `worker` (with one flavour, `cpu` or `gpu`),
`torch`, `console`. Two things are held here, without the network:

- What `pip install '.[role]'` resolves to: the project's requirements for those extras, then every
  requirement of those distributions in turn, as their installed metadata states it (markers
  evaluated for this machine, extras followed). The gateway's set has no torch, no faiss and no
  ONNX Runtime; an ONNX worker's has no torch and no transformers.
- That the role's process runs on that set: its entry module is imported in a fresh interpreter,
  every third-party module our loaded modules import at their top level belongs to a distribution
  of the set, and the heavy libraries the role goes without are not in `sys.modules`.

docs/how-to/cluster.md has the sizes and cold starts of each role (scripts/roles).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import cache
from importlib import metadata

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

from tests.paths import REPO_ROOT
from tests.unit.test_install_flavours import requirements
from tests.unit.test_layout import PRODUCT

HEAVY = frozenset(map(canonicalize_name, ["torch", "transformers", "safetensors", "faiss-cpu", "faiss-gpu",
                                          "onnxruntime", "onnxruntime-gpu", "onnx"]))
HEAVY_IMPORTS = ("torch", "transformers", "faiss", "onnxruntime", "onnx")


def resolved(*extras: str) -> set[NormalizedName]:
    """The distributions `pip install '.[extras]'` installs, from pyproject.toml and the installed
    metadata of everything it names (every one of them is installed here: .[dev] holds them all)."""
    environment: dict[str, str] = dict(default_environment())
    found: set[NormalizedName] = set()
    todo = [(requirement, "") for requirement in requirements(*extras)]
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({**environment, "extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        visit = [(name, "")] + [(name, wanted) for wanted in sorted(requirement.extras)]
        for dist_name, wanted in visit:
            key = canonicalize_name(f"{dist_name}[{wanted}]") if wanted else dist_name
            if key in found:
                continue
            found.add(key)
            try:
                needs = metadata.requires(dist_name) or []
            except metadata.PackageNotFoundError:
                continue  # not for this platform, or an extra nothing here installs
            todo += [(Requirement(text), wanted) for text in needs]
    return {name for name in found if "[" not in name}


# The heavy libraries each role may resolve to: a worker's flavour, nothing else.
MAY_HOLD = {
    ("gateway",): frozenset(),
    ("console",): frozenset(),
    ("worker", "cpu"): frozenset({"onnxruntime", "faiss-cpu"}),
    ("worker", "gpu"): frozenset({"onnxruntime-gpu", "faiss-gpu"}),
}


@pytest.mark.parametrize("extras", sorted(MAY_HOLD), ids=",".join)
def test_a_role_without_torch_resolves_to_no_heavy_library_it_does_not_run(extras: tuple[str, ...]) -> None:
    extra_held = resolved(*extras) & HEAVY - MAY_HOLD[extras]
    assert not extra_held, f".[{','.join(extras)}] pulls {sorted(extra_held)}"


def test_the_gateway_resolves_to_no_torch_no_faiss_and_no_onnxruntime() -> None:
    found = resolved("gateway")
    assert {"fastapi", "uvicorn", "aiokafka", "redis", "grpcio"} <= found  # the resolver did follow them
    assert not found & HEAVY, sorted(found & HEAVY)


# role -> (the extras it installs, the modules its process imports at start, what it goes without)
ROLES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "gateway": (("gateway",), ("gateway.main", "gateway.app"), HEAVY_IMPORTS + ("tokenizers", "jinja2")),
    "worker-onnx": (("worker", "cpu"), ("workers.main", "models.backends.onnx", "workers.cache.semantic"),
                    ("torch", "transformers")),
    "console": (("console",), ("fleet.console.main", "fleet.console.app"), HEAVY_IMPORTS),
    "fleet": ((), ("fleet.cli",), HEAVY_IMPORTS + ("fastapi", "tokenizers")),
}

PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


@cache
def distributions_of_imports() -> dict[str, list[str]]:
    return metadata.packages_distributions()


def top_level_imports(module: str) -> set[str]:
    """The top-level names of what the module imports outside its functions (what loading it needs)."""
    path = REPO_ROOT.joinpath(*module.split("."))
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    names: set[str] = set()
    stack: list[ast.AST] = [ast.parse(source.read_text())]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            names.add(node.module.split(".")[0])
        stack += list(ast.iter_child_nodes(node))
    return names


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_role_s_process_imports_only_what_its_extras_install(role: str) -> None:
    extras, entry, without = ROLES[role]
    loaded = json.loads(subprocess.run([sys.executable, "-c", PROBE, *entry], cwd=REPO_ROOT, check=True,
                                       capture_output=True, text=True).stdout)
    ours = [name for name in loaded if name.split(".")[0] in PRODUCT]
    needed = {top for module in ours for top in top_level_imports(module)} - set(sys.stdlib_module_names) - set(PRODUCT)
    installed = resolved(*extras)
    providers = {top: {canonicalize_name(d) for d in distributions_of_imports().get(top, [top])} for top in needed}
    missing = {top: sorted(dists) for top, dists in providers.items() if not dists & installed}
    assert not missing, f"{role} imports what .[{','.join(extras)}] does not install: {missing}"
    present = sorted({name.split(".")[0] for name in loaded} & set(without))
    assert not present, f"{role} loads {present} at start"
