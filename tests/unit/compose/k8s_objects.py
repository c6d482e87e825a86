"""The objects of compose/k8s/ as `kubectl apply -k` would send them (the files its kustomization
lists), and what each container of them runs with: its command and its effective environment
(ConfigMaps and Secrets it takes with envFrom, then its own env). Used by test_k8s_manifests.py."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from tests.paths import REPO_ROOT as ROOT

K8S = ROOT / "compose" / "k8s"
KUSTOMIZATION = K8S / "kustomization.yaml"
WORKLOAD_KINDS = ("Deployment", "Job")


@dataclass(frozen=True)
class Manifest:
    file: str
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc["kind"])

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])

    @property
    def id(self) -> str:
        return f"{self.file}:{self.kind}/{self.name}"


@cache
def kustomization() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(KUSTOMIZATION.read_text())
    return loaded


@cache
def manifests() -> tuple[Manifest, ...]:
    return tuple(Manifest(file, doc) for file in kustomization()["resources"]
                 for doc in yaml.safe_load_all((K8S / file).read_text()) if doc is not None)


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [manifest.doc for manifest in manifests() if manifest.kind == kind]


def find(kind: str, name: str) -> dict[str, Any]:
    found = [doc for doc in of_kind(kind) if doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} named {name}, found {len(found)}"
    return found[0]


def pod_template(workload: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = workload["spec"]["template"]
    return template


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a matchLabels selector picks pods with `labels` (the manifests use no matchExpressions)."""
    assert set(selector) == {"matchLabels"}, selector
    return all(labels.get(key) == value for key, value in selector["matchLabels"].items())


@dataclass(frozen=True)
class Container:
    owner: dict[str, Any]  # the Deployment or Job
    spec: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.owner['kind']}/{self.owner['metadata']['name']}/{self.spec['name']}"

    @property
    def pod(self) -> dict[str, Any]:
        pod: dict[str, Any] = pod_template(self.owner)["spec"]
        return pod

    @property
    def command(self) -> list[str]:
        return [str(part) for part in self.spec.get("command", [])]

    @property
    def env(self) -> dict[str, str]:
        """What the process sees: envFrom sources in order, then env (which wins)."""
        env: dict[str, str] = {}
        for source in self.spec.get("envFrom", []):
            if "configMapRef" in source:
                env |= find("ConfigMap", source["configMapRef"]["name"]).get("data", {})
            else:
                env |= secret_data(find("Secret", source["secretRef"]["name"]))
        for item in self.spec.get("env", []):
            # valueFrom (e.g. the pod name) is only known in the cluster; any string stands in for it.
            env[item["name"]] = str(item["value"]) if "value" in item else f"$({item['valueFrom']})"
        return env

    def port(self, ref: int | str) -> int:
        """A probe's or Service's port, resolved through the container's named ports."""
        if isinstance(ref, int):
            return ref
        named = {port["name"]: port["containerPort"] for port in self.spec.get("ports", [])}
        assert ref in named, f"{self.id} has no port named {ref!r}"
        return int(named[ref])

    def mounts(self) -> dict[str, dict[str, Any]]:
        """Volume mounts by the PersistentVolumeClaim they mount."""
        claims = {volume["name"]: volume["persistentVolumeClaim"]["claimName"]
                  for volume in self.pod.get("volumes", []) if "persistentVolumeClaim" in volume}
        return {claims[mount["name"]]: mount for mount in self.spec.get("volumeMounts", []) if mount["name"] in claims}


def secret_data(secret: dict[str, Any]) -> dict[str, str]:
    decoded = {key: base64.b64decode(value).decode() for key, value in secret.get("data", {}).items()}
    return decoded | secret.get("stringData", {})


@cache
def containers() -> tuple[Container, ...]:
    return tuple(Container(workload, spec) for kind in WORKLOAD_KINDS for workload in of_kind(kind)
                 for spec in pod_template(workload)["spec"]["containers"])


def workers() -> list[Container]:
    return [container for container in containers() if container.command[:1] == ["fleet-worker"]]
