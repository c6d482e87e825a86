"""The local model registry: immutable, checked, hash-pinned model versions on disk.

Layout: `<root>/<name>/<version_id>/` holds a version's artifacts and its `manifest.json`.
The manifest is written last, atomically, and only for a version whose accuracy check
passed, so a folder without one is an unfinished or failed build and is never served.
Versions are immutable: registering never overwrites an existing manifest.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from datetime import date
from pathlib import Path

from pydantic import ValidationError

from models.manifest import (
    MANIFEST_FILE,
    TOKENIZER_INPUTS,
    TORCH_CONFIG_FILE,
    TORCH_WEIGHTS_FILE,
    AccuracyCheck,
    HyperparameterValue,
    ImportFormat,
    ImportSource,
    ModelManifest,
    ModelSource,
    OutputSpec,
    Precision,
    TensorSpec,
    parse_version_id,
)
from schemas.tasks import TASKS, Task

# The manifest types are defined in models.manifest; they are re-exported here, where
# builders and importers have always found them.
__all__ = [
    "MANIFEST_FILE", "TASKS", "TOKENIZER_INPUTS", "TORCH_CONFIG_FILE", "TORCH_WEIGHTS_FILE", "AccuracyCheck",
    "CheckNotPassed", "HyperparameterValue", "ImportFormat", "ImportSource", "ModelIntegrityError",
    "ModelManifest", "ModelNotFound", "ModelRegistry", "ModelSource", "OutputSpec", "Precision", "RegistryError",
    "Task", "TensorSpec", "hash_files", "parse_version_id", "sha256_of",
]

# A model name is also a folder name and a version-id prefix: keep it filesystem- and
# Kafka-topic-safe.
_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")
_HASH_CHUNK_BYTES = 1 << 20


class RegistryError(Exception):
    """Base class of everything the registry refuses."""


class ModelNotFound(RegistryError, LookupError):
    """No registered version matches the request; the message names what does exist."""


class ModelIntegrityError(RegistryError):
    """An artifact on disk no longer matches the sha256 its manifest pinned."""


class CheckNotPassed(RegistryError):
    """Refused to register a version whose accuracy check failed."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def hash_files(folder: Path, filenames: Iterable[str]) -> dict[str, str]:
    """The `files` map of a manifest for artifacts already written into `folder`."""
    return {filename: sha256_of(folder / filename) for filename in sorted(filenames)}


class ModelRegistry:
    def __init__(self, root: Path) -> None:
        self.root = root

    def version_dir(self, name: str, version_id: str) -> Path:
        """Where a version's artifacts live; builders write into it before `register`."""
        _check_name(name)
        if parse_version_id(name, version_id) is None:
            raise ValueError(f"{version_id!r} is not a version id of {name!r}")
        return self.root / name / version_id

    def versions(self, name: str) -> list[ModelManifest]:
        """Registered versions of `name`, oldest first (folders without a manifest are skipped)."""
        _check_name(name)
        model_dir = self.root / name
        if not model_dir.is_dir():
            return []
        found: list[tuple[tuple[date, int], ModelManifest]] = []
        for entry in model_dir.iterdir():
            order = parse_version_id(name, entry.name)
            manifest_path = entry / MANIFEST_FILE
            if order is None or not manifest_path.is_file():
                continue
            manifest = _read_manifest(manifest_path)
            if manifest.id != entry.name or manifest.name != name:
                raise RegistryError(f"{manifest_path} describes {manifest.id!r}, not {entry.name!r}")
            found.append((order, manifest))
        return [manifest for _, manifest in sorted(found, key=lambda pair: pair[0])]

    def resolve(self, name: str, version: str | None = None, precision: str | None = None) -> ModelManifest:
        """The pinned `version`, else the newest registered version of `precision` (any if None)."""
        registered = self.versions(name)
        if version is not None:
            for manifest in registered:
                if manifest.id == version:
                    if precision is not None and manifest.precision != precision:
                        raise ModelNotFound(f"version {version!r} of {name!r} is {manifest.precision}, not {precision}")
                    return manifest
            raise ModelNotFound(f"no version {version!r} of {name!r}; {self._describe(name, registered)}")
        candidates = [m for m in registered if precision is None or m.precision == precision]
        if not candidates:
            wanted = f"{precision} version" if precision is not None else "version"
            raise ModelNotFound(f"no {wanted} of {name!r}; {self._describe(name, registered)}")
        return candidates[-1]

    def path_of(self, manifest: ModelManifest, filename: str) -> Path:
        if filename not in manifest.files:
            raise KeyError(f"{filename!r} is not an artifact of {manifest.id} (has {sorted(manifest.files)})")
        return self.version_dir(manifest.name, manifest.id) / filename

    def verify(self, manifest: ModelManifest) -> None:
        """Recompute every artifact's sha256; raise ModelIntegrityError naming the first mismatch."""
        for filename, expected in sorted(manifest.files.items()):
            path = self.path_of(manifest, filename)
            if not path.is_file():
                raise ModelIntegrityError(f"{manifest.id}: artifact {filename} is missing ({path})")
            actual = sha256_of(path)
            if actual != expected:
                raise ModelIntegrityError(
                    f"{manifest.id}: artifact {filename} has sha256 {actual}, manifest pins {expected} ({path})"
                )

    def next_version_id(self, name: str, day: date) -> str:
        """`<name>-YYYYMMDD-NNN` with NNN one past the highest used that day.

        Folders count even without a manifest, so two builds never stage into the same
        folder. (A failed build removes its folder; its unreferenced id may then be reused.)
        """
        _check_name(name)
        model_dir = self.root / name
        used = [0]
        if model_dir.is_dir():
            for entry in model_dir.iterdir():
                parsed = parse_version_id(name, entry.name)
                if parsed is not None and parsed[0] == day:
                    used.append(parsed[1])
        return f"{name}-{day:%Y%m%d}-{max(used) + 1:03d}"

    def register(self, manifest: ModelManifest) -> ModelManifest:
        """Publish a version whose artifacts are already in `version_dir`.

        Refuses a failed check, an existing version, and artifacts that do not match the
        manifest's hashes. The manifest appears atomically (temp file, fsync, rename), so a
        reader sees either no version or a complete one.
        """
        if not manifest.check.passed:
            check = manifest.check
            figures = "".join(f", {key} = {value:.6g}" for key, value in sorted(check.figures.items()))
            raise CheckNotPassed(
                f"{manifest.id}: check {check.name} failed: {check.metric} = {check.value:.6g}, "
                f"needs {check.comparison} {check.threshold:.6g}{figures}; not registered"
            )
        folder = self.version_dir(manifest.name, manifest.id)
        final = folder / MANIFEST_FILE
        if final.exists():
            raise RegistryError(f"{manifest.id} is already registered; versions are immutable")
        self.verify(manifest)
        temporary = folder / f".{MANIFEST_FILE}.{os.getpid()}.tmp"
        with temporary.open("w", encoding="utf-8") as stream:
            stream.write(manifest.model_dump_json(indent=2) + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, final)
        return manifest

    def _describe(self, name: str, registered: list[ModelManifest]) -> str:
        if not registered:
            return f"nothing of that name is registered in {self.root} (run scripts/build-models)"
        listing = ", ".join(f"{m.id} ({m.precision})" for m in registered)
        return f"registered in {self.root}: {listing}"


def _check_name(name: str) -> None:
    if not _NAME_PATTERN.fullmatch(name):
        raise ValueError(f"model name {name!r} must be lowercase letters, digits and dashes")


def _read_manifest(path: Path) -> ModelManifest:
    try:
        return ModelManifest.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError) as error:
        raise RegistryError(f"unreadable manifest {path}: {error}") from error
