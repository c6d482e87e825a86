"""compose/docker-compose.yml configures the fleet only through real FLEET_* settings fields."""

from __future__ import annotations

import re
import tomllib
import xml.etree.ElementTree as ET
from typing import Any

import pytest
import yaml

from common.settings import ENV_PREFIX, FleetSettings
from gateway.settings import GatewaySettings
from tests.paths import REPO_ROOT as ROOT
from tests.unit.compose.fleet_env import env_names, settings_class, settings_from, unknown_fleet_names
from workers.settings import WorkerSettings

COMPOSE = ROOT / "compose" / "docker-compose.yml"
DOCKERFILE = ROOT / "compose" / "Dockerfile"
POM = ROOT / "compose" / "kafka" / "pom.xml"
APP_IMAGE = "kafka-inference-fleet:local"


def _services() -> dict[str, dict[str, Any]]:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert isinstance(services, dict)
    return services


def _command(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return command.split() if isinstance(command, str) else [str(part) for part in command]


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(key): "" if value is None else str(value) for key, value in env.items()}


def _settings_class(service: dict[str, Any]) -> type[FleetSettings] | None:
    """The settings class the service's process builds; None for third-party images."""
    known = settings_class(_command(service), _environment(service))
    if known is None and service.get("image") == APP_IMAGE:
        return FleetSettings  # another one-shot of the fleet's image: shared settings only
    return known


def test_has_kafka_redis_gateway_and_two_workers() -> None:
    services = _services()
    assert {"kafka", "redis"} <= services.keys()
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["redis"]["image"].startswith("redis:7")
    kinds = [_settings_class(service) for service in services.values()]
    assert kinds.count(GatewaySettings) == 1
    assert kinds.count(WorkerSettings) >= 2


def test_redis_keeps_an_append_only_file_on_a_volume() -> None:
    redis = _services()["redis"]
    command = [str(part) for part in redis["command"]]
    options = dict(zip(command[1::2], command[2::2], strict=False))
    assert options["--appendonly"] == "yes" and options["--appendfsync"] == "everysec"
    assert any(str(volume).endswith(":/data") for volume in redis["volumes"]), "the AOF outlives the container"


@pytest.mark.parametrize("name", sorted(_services()))
def test_fleet_env_names_are_settings_fields(name: str) -> None:
    service = _services()[name]
    fleet_env = {key for key in _environment(service) if key.startswith(ENV_PREFIX)}
    cls = _settings_class(service)
    if cls is None:
        assert not fleet_env, f"{name} is not a fleet process but sets {sorted(fleet_env)}"
        return
    unknown = unknown_fleet_names(fleet_env, cls)
    assert not unknown, f"{name}: {sorted(unknown)} are not fields of {cls.__name__}"


@pytest.mark.parametrize("name", sorted(_services()))
def test_fleet_env_values_validate(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    service = _services()[name]
    cls = _settings_class(service)
    if cls is None:
        return
    settings_from(cls, _environment(service), monkeypatch)  # raises when a value does not parse


def test_services_reach_each_other_by_service_name() -> None:
    services = _services()
    for service in services.values():
        env = _environment(service)
        if "FLEET_KAFKA_BOOTSTRAP" in env:
            host = env["FLEET_KAFKA_BOOTSTRAP"].split(":")[0]
            advertised = str(services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"])
            assert f"//{env['FLEET_KAFKA_BOOTSTRAP']}" in advertised and host == "kafka"
        if "FLEET_REDIS_URL" in env:
            assert env["FLEET_REDIS_URL"].startswith("redis://redis:")


def test_gateway_listens_on_all_interfaces() -> None:
    gateway = next(s for s in _services().values() if _settings_class(s) is GatewaySettings)
    assert _environment(gateway)["FLEET_HOST"] == "0.0.0.0"


def test_kafka_image_is_the_local_stack_version() -> None:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    version = ET.parse(POM).getroot().findtext("m:properties/m:kafka.version", namespaces=ns)
    assert version
    assert _services()["kafka"]["image"] == f"apache/kafka:{version}"


def test_dockerfile_env_names_are_shared_settings_fields() -> None:
    names = set(re.findall(r"\b(FLEET_[A-Z0-9_]+)=", DOCKERFILE.read_text()))
    assert names, "the Dockerfile sets the registry location"
    assert names <= env_names(FleetSettings)


def test_the_image_copies_every_package_pyproject_installs() -> None:
    # A package missing here installs fine and fails only when a process imports it in the container.
    includes = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in includes}
    copied = set(re.findall(r"^COPY (\w+) \./\1$", DOCKERFILE.read_text(), flags=re.MULTILINE))
    assert packages and packages <= copied, f"compose/Dockerfile does not COPY {sorted(packages - copied)}"
