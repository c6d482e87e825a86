"""compose/docker-compose.yml configures the fleet only through real FLEET_* settings fields, and its three
images (compose/Dockerfile.gateway: the gateway alone; compose/Dockerfile: the CPU workers and the model
build; compose/Dockerfile.gpu: the GPU workers) install the roles (pyproject.toml's extras) of the
processes that run them. Static: there is no container engine on these machines."""

from __future__ import annotations

import re
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from common.settings import ENV_PREFIX, FleetSettings
from gateway.settings import GatewaySettings
from tests.paths import REPO_ROOT as ROOT
from tests.unit.compose.fleet_env import env_names, settings_class, settings_from, unknown_fleet_names
from workers.settings import WorkerSettings

COMPOSE = ROOT / "compose" / "docker-compose.yml"
DOCKERFILE = ROOT / "compose" / "Dockerfile"
GPU_DOCKERFILE = ROOT / "compose" / "Dockerfile.gpu"
GATEWAY_DOCKERFILE = ROOT / "compose" / "Dockerfile.gateway"
POM = ROOT / "compose" / "kafka" / "pom.xml"
APP_IMAGE = "kafka-inference-fleet:local"
GPU_IMAGE = "kafka-inference-fleet-gpu:local"
GATEWAY_IMAGE = "kafka-inference-fleet-gateway:local"
# Each image that runs models and the flavour of ONNX Runtime and faiss it installs (pyproject.toml's extras).
IMAGES = {APP_IMAGE: (DOCKERFILE, "cpu"), GPU_IMAGE: (GPU_DOCKERFILE, "gpu")}
# Each image and the roles (extras) it installs: the worker images a worker, the gateway's no model library.
ROLES = {APP_IMAGE: {"worker", "build", "cpu"}, GPU_IMAGE: {"worker", "torch", "gpu"}, GATEWAY_IMAGE: {"gateway"}}
DOCKERFILES = [DOCKERFILE, GPU_DOCKERFILE, GATEWAY_DOCKERFILE]
BUILT = {**{image: dockerfile for image, (dockerfile, _) in IMAGES.items()}, GATEWAY_IMAGE: GATEWAY_DOCKERFILE}


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
    if known is None and service.get("image") in BUILT:
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


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_dockerfile_env_names_are_shared_settings_fields(dockerfile: Path) -> None:
    names = set(re.findall(r"\b(FLEET_[A-Z0-9_]+)=", dockerfile.read_text()))
    assert names, "the Dockerfile sets the registry location"
    assert names <= env_names(FleetSettings)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_the_image_copies_every_package_pyproject_installs(dockerfile: Path) -> None:
    # A package missing here installs fine and fails only when a process imports it in the container.
    includes = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.split(".")[0] for pattern in includes}  # "models", "models.*" -> models
    copied = set(re.findall(r"^COPY (\w+) \./\1$", dockerfile.read_text(), flags=re.MULTILINE))
    assert packages and packages <= copied, f"{dockerfile.name} does not COPY {sorted(packages - copied)}"


def _installed_extras(dockerfile: Path) -> set[str]:
    """The extras of the one `pip install` of the project, which must go through constraints.txt."""
    [(options, extras)] = re.findall(r"^RUN pip install (.*?)\s*\"\.\[([\w,]+)\]\"", dockerfile.read_text(),
                                     flags=re.MULTILINE)
    assert "-c constraints.txt" in options, f"{dockerfile.name} installs without the pinned versions"
    return set(extras.split(","))


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_each_image_installs_its_flavour_alone_at_the_pinned_versions(image: str) -> None:
    dockerfile, flavour = IMAGES[image]
    text = dockerfile.read_text()
    assert _installed_extras(dockerfile) & {"cpu", "gpu"} == {flavour}
    assert re.search(r"^COPY .*\bconstraints\.txt\b.* \./$", text, flags=re.MULTILINE), "constraints.txt is copied"
    assert re.search(r"\]\" && fleet doctor$", text, flags=re.MULTILINE), "the build fails on a mixed install"
    # BuildKit reads <Dockerfile>.dockerignore beside it: both images leave out the same things.
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    assert ignore.read_text() == DOCKERFILE.with_name("Dockerfile.dockerignore").read_text()


@pytest.mark.parametrize("image", sorted(ROLES))
def test_each_image_installs_the_roles_of_its_processes(image: str) -> None:
    assert _installed_extras(BUILT[image]) == ROLES[image]


def test_the_gateway_runs_the_gateway_image_and_no_worker_does() -> None:
    services = _services()
    assert services["gateway"]["image"] == GATEWAY_IMAGE
    assert all(service["image"] != GATEWAY_IMAGE for service in _worker_services().values())
    assert _services()["models"]["image"] == APP_IMAGE, "the model build needs the build extra"


def _pins() -> dict[str, str]:
    lines = [line for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line]
    return dict(line.split("==", 1) for line in lines if not line.startswith("#"))


def test_the_gpu_image_is_a_cuda_base_of_the_pinned_cuda_major_with_the_python_the_project_needs() -> None:
    text = GPU_DOCKERFILE.read_text()
    [(major, minor)] = re.findall(r"^FROM nvidia/cuda:(\d+)\.(\d+)\.\d+-(?:base|runtime|cudnn-runtime)-ubuntu[\d.]+$",
                                  text, flags=re.MULTILINE)
    # torch's and onnxruntime-gpu's CUDA libraries are the nvidia-* pins: the base asks the host's
    # driver for that major release, at a minor no newer than theirs (minor version compatibility).
    pinned_major, pinned_minor = _pins()["nvidia-cuda-runtime"].split(".")[:2]
    assert major == pinned_major and int(minor) <= int(pinned_minor)
    [python] = re.findall(r"apt-get install [^\n]*\bpython(3\.\d+)-venv\b", text)
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert SpecifierSet(requires).contains(python), f"python {python} against requires-python {requires}"
    assert re.search(rf"^\s*&& python{re.escape(python)} -m venv /opt/fleet$", text, flags=re.MULTILINE)
    assert "download.pytorch.org/whl/cpu" not in text, "the GPU image keeps PyPI's CUDA build of torch"


def _worker_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in _services().items() if _settings_class(s) is WorkerSettings}


def test_cuda_workers_run_the_gpu_image_behind_the_gpu_profile_with_a_device_reservation() -> None:
    workers = _worker_services()
    cuda = {name for name, service in workers.items() if _environment(service).get("FLEET_DEVICE") == "cuda"}
    assert cuda, "compose has a GPU worker"
    for name, service in workers.items():
        devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        if name not in cuda:
            assert service["image"] == APP_IMAGE and not devices and "profiles" not in service, name
            continue
        # Only with `--profile gpu`: a plain `docker compose up` runs on a host without a GPU.
        assert service["profiles"] == ["gpu"], name
        assert service["image"] == GPU_IMAGE and service["build"]["dockerfile"] == "compose/Dockerfile.gpu", name
        [device] = devices
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"], name
        assert device.get("count", "all") == "all" or int(device["count"]) >= 1, name


def test_every_image_a_service_builds_has_its_dockerfile_here() -> None:
    built = {}
    for name, service in _services().items():
        if "build" in service:
            build = service["build"]
            context = (COMPOSE.parent / build["context"]).resolve()
            assert context == ROOT, f"{name} builds from the repository root"
            built[service["image"]] = context / build["dockerfile"]
    assert built == BUILT
    assert all(path.is_file() for path in built.values())
