"""compose/k8s/ is valid Kubernetes, and it configures and probes the fleet the way the fleet works.

Every object is validated against the Kubernetes JSON schemas bundled by the PyPI package
kubernetes-validate (strict: unknown fields fail), offline. The KEDA ScaledObject, a custom
resource those schemas do not cover, is validated against keda_scaledobject.schema.json,
written from KEDA's documented spec. Then the cross-checks a schema cannot make: FLEET_*
names are real settings of the process they configure, probes hit the endpoints that
process serves, KEDA scales the group its Deployment joins, workers read the registry the
Job builds.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gateway.app import create_app
from gateway.settings import GatewaySettings
from schemas.names import consumer_group
from tests.paths import REPO_ROOT
from tests.unit.compose.fleet_env import settings_class, settings_from, unknown_fleet_names
from tests.unit.compose.k8s_objects import (K8S, Container, containers, find, kustomization, manifests, of_kind,
                                    pod_template, secret_data, selects, workers)
from workers.health.endpoints import LIVENESS_PATHS, READINESS_PATH
from workers.runtime_settings import ModelMemberSettings
from workers.settings import WorkerSettings

# The oldest minor release whose schemas the manifests must pass: autoscaling/v2 and policy/v1
# are GA well before it, and it is the oldest still supported by the large managed offerings.
KUBERNETES_VERSION = "1.30"
KEDA_SCHEMA = Path(__file__).with_name("keda_scaledobject.schema.json")
KEDA_AUTH_SCHEMA = Path(__file__).with_name("keda_triggerauthentication.schema.json")
KEDA_API = "keda.sh/v1alpha1"
UVICORN_GRACEFUL_S = 5  # gateway/main.py timeout_graceful_shutdown

CORE = [manifest for manifest in manifests() if manifest.doc["apiVersion"] != KEDA_API]


def test_kustomization_applies_every_manifest_in_the_folder_into_its_namespace() -> None:
    on_disk = {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization()["resources"]) == on_disk
    namespaces = of_kind("Namespace")
    assert [ns["metadata"]["name"] for ns in namespaces] == [kustomization()["namespace"]]
    assert all("namespace" not in m.doc["metadata"] for m in manifests()), "kustomize sets the namespace"
    images = {image["name"] for image in kustomization()["images"]}
    assert {c.spec["image"].split(":")[0] for c in containers()} <= images


def test_the_fleet_has_every_kind_of_object_it_needs() -> None:
    kinds = {manifest.kind for manifest in manifests()}
    assert {"Namespace", "ConfigMap", "Secret", "Deployment", "Service", "HorizontalPodAutoscaler",
            "PodDisruptionBudget", "Job", "PersistentVolumeClaim", "ScaledObject"} <= kinds


@pytest.mark.parametrize("manifest", CORE, ids=[manifest.id for manifest in CORE])
def test_manifest_matches_the_kubernetes_schema(manifest: Any) -> None:
    try:
        kubernetes_validate.validate(manifest.doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = "/".join(str(part) for part in exc.caught.absolute_path)
        pytest.fail(f"{manifest.id}: {path}: {exc.caught.message}")


def test_the_validator_rejects_a_misspelt_field_and_a_wrong_type() -> None:
    deployment = copy.deepcopy(find("Deployment", "fleet-worker-minilm-embed"))
    pod_template(deployment)["spec"]["containers"][0]["readinessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="readinessprobe"):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    job = copy.deepcopy(find("Job", "fleet-build-models"))
    job["spec"]["backoffLimit"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError, match="two"):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


def keda_validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(KEDA_SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_keda_scaledobject_matches_its_documented_spec() -> None:
    [scaled] = of_kind("ScaledObject")
    keda_validator().validate(scaled)
    # KEDA hands this to the HPA it creates: Kubernetes' own schema judges it.
    behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "keda-hpa"},
           "spec": {"scaleTargetRef": scaled["spec"]["scaleTargetRef"] | {"kind": "Deployment"},
                    "maxReplicas": scaled["spec"]["maxReplicaCount"], "behavior": behavior}}
    kubernetes_validate.validate(hpa, KUBERNETES_VERSION, strict=True)
    misspelt = copy.deepcopy(scaled)
    misspelt["spec"]["maxReplicas"] = misspelt["spec"].pop("maxReplicaCount")
    assert not keda_validator().is_valid(misspelt)


def test_keda_reads_the_lag_with_the_fleets_own_kafka_credentials() -> None:
    [scaled] = of_kind("ScaledObject")
    triggers = scaled["spec"]["triggers"]
    [auth] = of_kind("TriggerAuthentication")
    schema = json.loads(KEDA_AUTH_SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(auth)
    assert {trigger["authenticationRef"]["name"] for trigger in triggers} == {auth["metadata"]["name"]}
    [secret] = of_kind("Secret")
    credentials = secret_data(secret)
    refs = {ref["parameter"]: ref for ref in auth["spec"]["secretTargetRef"]}
    assert {ref["name"] for ref in refs.values()} == {secret["metadata"]["name"]}
    assert refs["username"]["key"] == "FLEET_KAFKA_SASL_USERNAME" and refs["password"]["key"] == "FLEET_KAFKA_SASL_PASSWORD"
    assert all(ref["key"] in credentials for ref in refs.values())
    # KEDA speaks the protocol the fleet speaks: SCRAM-SHA-512 over TLS (secret.yaml).
    mechanism = credentials["FLEET_KAFKA_SASL_MECHANISM"].lower().replace("-", "_").replace("sha_", "sha")
    for trigger in triggers:
        assert trigger["metadata"]["sasl"] == mechanism
        assert (trigger["metadata"]["tls"] == "enable") == credentials["FLEET_KAFKA_SECURITY_PROTOCOL"].endswith("SSL")


def test_keda_scales_the_primary_group_its_deployment_joins_within_the_partitions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    [scaled] = of_kind("ScaledObject")
    [worker] = [c for c in workers() if c.owner["metadata"]["name"] == scaled["spec"]["scaleTargetRef"]["name"]]
    assert worker.owner["kind"] == scaled["spec"]["scaleTargetRef"].get("kind", "Deployment")
    settings = settings_from(WorkerSettings, worker.env, monkeypatch)
    assert isinstance(settings, WorkerSettings) and settings.role.value == "primary"
    triggers = scaled["spec"]["triggers"]
    # One trigger per lane the group reads, the interactive lane scaling at the smaller lag.
    assert [t["metadata"]["topic"] for t in triggers] == settings.lane_plan.topics(settings.model)
    for trigger in triggers:
        meta = trigger["metadata"]
        assert trigger["type"] == "kafka" and meta["bootstrapServers"] == settings.kafka_bootstrap
        assert meta["consumerGroup"] == consumer_group(settings.model, "primary")
        assert meta["allowIdleConsumers"] == "false" and int(meta["lagThreshold"]) > 0
    thresholds = [int(t["metadata"]["lagThreshold"]) for t in triggers]
    assert thresholds == sorted(thresholds) and thresholds[0] < thresholds[-1]
    assert 1 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"] <= settings.partitions
    assert "replicas" not in worker.owner["spec"], "KEDA owns the replica count"


@pytest.mark.parametrize("container", containers(), ids=[c.id for c in containers()])
def test_fleet_env_names_are_settings_of_the_process_and_parse(container: Container,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cls = settings_class(container.command, container.env)
    assert cls is not None, f"{container.id} runs {container.command}, which is no fleet process"
    unknown = unknown_fleet_names(container.env, cls)
    assert not unknown, f"{container.id}: {sorted(unknown)} are not fields of {cls.__name__}"
    settings_from(cls, container.env, monkeypatch)  # raises when a value does not parse


@pytest.mark.parametrize("worker", workers(), ids=[c.id for c in workers()])
def test_worker_probes_hit_the_worker_health_endpoints(worker: Container, monkeypatch: pytest.MonkeyPatch) -> None:
    cls = settings_class(worker.command, worker.env)
    assert cls is not None and issubclass(cls, ModelMemberSettings), "a worker or a shadow"
    settings = settings_from(cls, worker.env, monkeypatch)
    assert isinstance(settings, ModelMemberSettings)
    assert settings.metrics_port is not None and settings.metrics_host == "0.0.0.0", "reachable by the kubelet"
    ready, live = worker.spec["readinessProbe"]["httpGet"], worker.spec["livenessProbe"]["httpGet"]
    assert ready["path"] == READINESS_PATH and live["path"] in LIVENESS_PATHS
    assert worker.port(ready["port"]) == worker.port(live["port"]) == settings.metrics_port


def test_gateway_probes_and_service_hit_the_gateway_routes(monkeypatch: pytest.MonkeyPatch) -> None:
    [gateway] = [c for c in containers() if c.command[:1] == ["fleet-gateway"]]
    settings = settings_from(GatewaySettings, gateway.env, monkeypatch)
    assert isinstance(settings, GatewaySettings) and settings.host == "0.0.0.0"
    routes = set(create_app(settings).openapi()["paths"])
    ready, live = gateway.spec["readinessProbe"]["httpGet"], gateway.spec["livenessProbe"]["httpGet"]
    assert ready["path"] == "/readyz" and live["path"] == "/healthz" and {"/readyz", "/healthz"} <= routes
    assert gateway.port(ready["port"]) == gateway.port(live["port"]) == settings.port
    service = find("Service", gateway.owner["metadata"]["name"])
    assert selects({"matchLabels": service["spec"]["selector"]}, pod_template(gateway.owner)["metadata"]["labels"])
    assert [gateway.port(port["targetPort"]) for port in service["spec"]["ports"]] == [settings.port]


def test_one_worker_deployment_per_model_and_role_with_the_primary_on_a_gpu() -> None:
    roles = [(c.env["FLEET_MODEL"], c.env.get("FLEET_ROLE", "primary")) for c in workers()]
    assert len(roles) == len(set(roles))
    assert {("minilm-embed", "primary"), ("minilm-embed", "fallback"), ("minilm-embed", "shadow")} <= set(roles)
    for worker in workers():
        gpus = worker.spec["resources"].get("limits", {}).get("nvidia.com/gpu")
        tolerated = {t["key"] for t in worker.pod.get("tolerations", [])}
        if worker.env.get("FLEET_DEVICE", "cpu").startswith("cuda"):
            assert gpus == 1 and "nvidia.com/gpu" in tolerated, worker.id
        else:
            assert gpus is None, f"{worker.id} runs on CPU but holds a GPU"
    primary = find("Deployment", "fleet-worker-minilm-embed")
    assert [c.env["FLEET_DEVICE"] for c in workers() if c.owner is primary] == ["cuda"]


def test_cuda_workers_run_the_gpu_image_the_gateway_its_own_and_every_other_container_the_cpu_one() -> None:
    """A CUDA worker on the CPU image is refused at start (ONNX Runtime's CPU wheel has no CUDA
    provider); a CPU process on the GPU image would pull gigabytes of CUDA libraries for nothing; the
    gateway runs no model and its image holds no model library."""
    cuda = {c.id for c in workers() if c.env.get("FLEET_DEVICE", "cpu").startswith("cuda")}
    assert cuda, "the GPU primary"
    for container in containers():
        image = container.spec["image"].split(":")[0]
        expected = ("kafka-inference-fleet-gpu" if container.id in cuda
                    else "kafka-inference-fleet-gateway" if container.spec.get("command") == ["fleet-gateway"]
                    else "kafka-inference-fleet")
        assert image == expected, container.id


def test_every_image_is_one_compose_builds_from_a_dockerfile_here() -> None:
    services = yaml.safe_load((REPO_ROOT / "compose" / "docker-compose.yml").read_text())["services"]
    built = {s["image"]: REPO_ROOT / s["build"]["dockerfile"] for s in services.values() if "build" in s}
    assert {c.spec["image"] for c in containers()} <= set(built), "each image names one compose builds (:local)"
    assert {image["name"] for image in kustomization()["images"]} == {image.split(":")[0] for image in built}
    assert all(dockerfile.is_file() for dockerfile in built.values())


def test_workers_read_the_registry_the_job_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    [job] = [c for c in containers() if c.owner["kind"] == "Job"]
    registry = job.command[job.command.index("--registry") + 1]
    [(claim, job_mount)] = job.mounts().items()
    assert job_mount["mountPath"] == registry and not job_mount.get("readOnly", False)
    assert "ReadWriteMany" in find("PersistentVolumeClaim", claim)["spec"]["accessModes"], "many nodes mount it"
    for worker in workers():
        cls = settings_class(worker.command, worker.env)
        assert cls is not None
        mount = worker.mounts()[claim]
        assert mount["readOnly"] is True
        assert str(settings_from(cls, worker.env, monkeypatch).registry_dir) == mount["mountPath"] == registry


def prestop_sleep_s(container: Container) -> int:
    command = container.spec["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and re.fullmatch(r"\d+", command[1]), command
    return int(command[1])


@pytest.mark.parametrize("container", [c for c in containers() if c.owner["kind"] == "Deployment"],
                         ids=[c.id for c in containers() if c.owner["kind"] == "Deployment"])
def test_pods_stop_gracefully(container: Container) -> None:
    """SIGTERM comes after the preStop; the grace period must leave the process time after it
    (workers: finish, deliver, commit, leave the group; gateway: finish requests in flight)."""
    grace = container.pod["terminationGracePeriodSeconds"]
    assert grace >= prestop_sleep_s(container) + max(UVICORN_GRACEFUL_S, 10)
    if container.command[:1] == ["fleet-gateway"]:
        assert prestop_sleep_s(container) >= 3, "the gateway outlives its removal from the Service's endpoints"


def test_autoscalers_and_disruption_budgets_select_existing_pods() -> None:
    deployments = {d["metadata"]["name"]: d for d in of_kind("Deployment")}
    for hpa in of_kind("HorizontalPodAutoscaler"):
        target = deployments[hpa["spec"]["scaleTargetRef"]["name"]]
        assert "replicas" not in target["spec"], "the HPA owns the replica count"
        assert all("cpu" in c["resources"]["requests"] for c in pod_template(target)["spec"]["containers"])
    for pdb in of_kind("PodDisruptionBudget"):
        chosen = [name for name, d in deployments.items()
                  if selects(pdb["spec"]["selector"], pod_template(d)["metadata"]["labels"])]
        assert chosen == [pdb["metadata"]["name"]], f"{pdb['metadata']['name']} selects {chosen}"
