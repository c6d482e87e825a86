"""The CPU and GPU flavours of ONNX Runtime and faiss never meet in one install.

Both flavours provide the same imports (`onnxruntime`, `faiss`) and overwrite each other's files,
so `pip install '.[gpu]'` with a CPU wheel in the base left the CPU wheel on top: no CUDA provider.
Held here from pyproject.toml itself (no network, no resolver): the base asks for neither flavour,
the extras `cpu` and `gpu` each ask for one distribution per import of their own flavour, no extra
(through the extras of ours it includes) asks for both, every flavour requirement is pinned in
constraints.txt, and no library installed here asks for a flavour on its own.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from models.backends.flavour import FLAVOURS, IMPORTS
from tests.paths import REPO_ROOT

PYPROJECT = REPO_ROOT / "pyproject.toml"
CONSTRAINTS = REPO_ROOT / "constraints.txt"
LIB_SH = REPO_ROOT / "scripts" / "lib.sh"
# distribution -> (import, flavour)
FLAVOUR_DISTS = {canonicalize_name(dist): (name, flavour) for name, dists in FLAVOURS.items()
                 for dist, flavour in dists.items()}


@cache
def project() -> dict[str, object]:
    loaded: dict[str, object] = tomllib.loads(PYPROJECT.read_text())["project"]
    return loaded


def extras() -> dict[str, list[str]]:
    found: dict[str, list[str]] = project()["optional-dependencies"]  # type: ignore[assignment]
    return found


def requirements(*chosen: str) -> list[Requirement]:
    """What `pip install '.[chosen,...]'` asks for directly: the base, then each chosen extra and the
    extras of this project that it names, as pip expands them."""
    own = canonicalize_name(str(project()["name"]))
    found = [Requirement(text) for text in project()["dependencies"]]  # type: ignore[attr-defined]
    todo, seen = list(chosen), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in map(Requirement, extras()[extra]):
            if canonicalize_name(requirement.name) == own:
                todo += sorted(requirement.extras)
            else:
                found.append(requirement)
    return found


def flavours_of(found: list[Requirement]) -> dict[str, set[str]]:
    """flavour -> the imports its requirements among `found` provide."""
    provided: dict[str, set[str]] = {}
    for requirement in found:
        if (hit := FLAVOUR_DISTS.get(canonicalize_name(requirement.name))) is not None:
            name, flavour = hit
            provided.setdefault(flavour, set()).add(name)
    return provided


def test_the_base_asks_for_neither_flavour() -> None:
    assert flavours_of(requirements()) == {}


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_each_flavour_extra_provides_every_import_once_and_only_its_own(flavour: str) -> None:
    found = [r for r in requirements(flavour) if canonicalize_name(r.name) in FLAVOUR_DISTS]
    assert flavours_of(found) == {flavour: set(IMPORTS)}
    assert len(found) == len(IMPORTS), f"[{flavour}] asks for {[str(r) for r in found]}"


@pytest.mark.parametrize("extra", sorted(extras()))
def test_no_extra_asks_for_both_flavours(extra: str) -> None:
    provided = flavours_of(requirements(extra))
    assert len(provided) <= 1, f"[{extra}] asks for {sorted(provided)}"
    if extra not in ("cpu", "gpu"):
        # Every other extra leaves the choice to the install (scripts/lib.sh: .[dev,<flavour>]).
        assert provided == {}, f"[{extra}] asks for the {sorted(provided)} flavour"


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_dev_with_a_flavour_has_that_flavour_alone(flavour: str) -> None:
    assert flavours_of(requirements("dev", flavour)) == {flavour: set(IMPORTS)}


def pins() -> dict[str, str]:
    lines = [line.strip() for line in CONSTRAINTS.read_text().splitlines()]
    return {canonicalize_name(name): version for line in lines if line and not line.startswith("#")
            for name, _, version in [line.partition("==")]}


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_every_flavour_requirement_is_pinned_within_its_range(flavour: str) -> None:
    pinned = pins()
    for requirement in map(Requirement, extras()[flavour]):
        version = pinned.get(canonicalize_name(requirement.name))
        assert version is not None, f"constraints.txt pins no {requirement.name}"
        assert requirement.specifier.contains(version), f"{requirement.name}=={version} is outside {requirement}"


def test_no_installed_library_asks_for_a_flavour_by_itself() -> None:
    """A third-party dependency that required, say, onnxruntime would bring the CPU wheel back beside
    the GPU one, whatever the extras say."""
    own = canonicalize_name(str(project()["name"]))
    asking = []
    for dist in metadata.distributions():
        if canonicalize_name(dist.metadata["Name"]) == own:
            continue
        for requirement in map(Requirement, dist.requires or []):
            unconditional = requirement.marker is None or requirement.marker.evaluate({"extra": ""})
            if unconditional and canonicalize_name(requirement.name) in FLAVOUR_DISTS:
                asking.append(f"{dist.metadata['Name']} requires {requirement}")
    assert not asking, asking


def test_the_scripts_install_dev_with_exactly_one_flavour_cpu_by_default() -> None:
    script = LIB_SH.read_text()
    assert re.search(r'^FLAVOUR=\$\{FLEET_FLAVOUR:-cpu\}$', script, re.MULTILINE)
    assert '-c "$ROOT/constraints.txt" -e "$ROOT[dev,$FLAVOUR]"' in script
    assert re.search(r"^\s*cpu \| gpu\) ;;$", script, re.MULTILINE), "any other FLEET_FLAVOUR is refused"
