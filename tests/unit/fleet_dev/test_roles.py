"""scripts/roles measures the roles pyproject.toml has: each role's extras exist, a worker installs
exactly one flavour, and the install before the role extras is one the old pyproject had."""

from __future__ import annotations

import pytest

from fleet_dev.roles import ROLES, Role
from tests.unit.test_install_flavours import extras


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_each_role_installs_extras_pyproject_has(role: Role) -> None:
    named = [extra for extra in role.extras.split(",") if extra]
    assert named and set(named) <= set(extras()), role.extras
    if role.start == "worker":
        assert len(set(named) & {"cpu", "gpu"}) == 1, "a worker installs one flavour"
        assert ("torch" in named) == (role.backend == "torch"), "torch only for the torch backend"
    assert set(filter(None, role.before.split(","))) <= {"cpu"}, "before the roles: the base, or .[cpu]"


def test_every_role_of_the_product_is_measured() -> None:
    assert {role.start for role in ROLES} == {"gateway", "worker", "console"}
