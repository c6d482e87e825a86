"""Which settings class a fleet process builds from its command line, and the FLEET_* names and
values it accepts. Shared by test_compose.py (docker-compose services) and
test_k8s_manifests.py (Kubernetes containers): both check that every FLEET_* variable they
set is a real field of the process it configures, and that its value parses."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

import pytest

from common.settings import ENV_PREFIX, FleetSettings
from gateway.settings import GatewaySettings
from workers.settings import Role, WorkerSettings
from workers.shadow.settings import ShadowSettings


def settings_class(command: Sequence[str], env: Mapping[str, str]) -> type[FleetSettings] | None:
    """The settings class the process started by `command` builds; None for third-party programs."""
    if list(command[:1]) == ["fleet-worker"]:
        return ShadowSettings if env.get("FLEET_ROLE", "").lower() == Role.shadow.value else WorkerSettings
    if list(command[:1]) == ["fleet-gateway"]:
        return GatewaySettings
    if list(command[:3]) == ["python", "-m", "models.build"]:
        return FleetSettings  # the model build reads the shared settings only
    return None


def env_names(cls: type[FleetSettings]) -> set[str]:
    return {ENV_PREFIX + name.upper() for name in cls.model_fields}


def unknown_fleet_names(names: Iterable[str], cls: type[FleetSettings]) -> set[str]:
    """The FLEET_* `names` that are no field of `cls` (pydantic-settings matches them case-insensitively)."""
    return {name for name in names if name.upper().startswith(ENV_PREFIX) and name.upper() not in env_names(cls)}


def settings_from(cls: type[FleetSettings], env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> FleetSettings:
    """`cls` built from exactly `env` (raises when a value does not parse as its field's type)."""
    for key in [key for key in os.environ if key.upper().startswith(ENV_PREFIX)]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return cls()
