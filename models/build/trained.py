"""Trained weights the build ships instead of learning them again on every machine.

Fine-tuning on a CPU gives another result on another CPU: dropout masks come from another
random stream on Intel and AMD, and GEMMs round differently with the instruction set and the
thread count. A verifier fine-tuned at install time crossed its tests' targets on one machine
and not on the next. So the maintainer trains once (`scripts/train-models`), and the result is
committed here, small, with a record of how it was made; `scripts/build-models` only applies it,
exports, quantises and checks, which every machine does the same way.

One folder per trained part, under `models/build/data/trained/<name>/`: its files and
`record.json` (sha256 of each file, the data version it learnt from, hyperparameters, library
versions, the machine, the gates it passed with their margins, and the hashes of the graphs the
maintainer's own build made from it, so that another build can say whether it reproduced them).
"""

from __future__ import annotations

import platform
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from models.manifest import HyperparameterValue
from models.registry import sha256_of

TRAINED_DIR = Path(__file__).resolve().parent / "data" / "trained"
RECORD_FILE = "record.json"
WEIGHTS_FILE = "weights.safetensors"

Tensors = dict[str, npt.NDArray[np.floating[Any]]]


class TrainedArtifactError(Exception):
    """A shipped artifact is missing, damaged or stale; retraining (scripts/train-models) fixes it."""


class TrainedRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    files: dict[str, str] = Field(description="file in the artifact's folder -> sha256 hex digest")
    training_data: str = Field(description="the data version it learnt from (name and hash of its sources)")
    hyperparameters: dict[str, HyperparameterValue]
    base: str = Field(description="what the weights adapt or sit on, as the build must find it")
    libraries: dict[str, str]
    trained_on: str = Field(description="the maintainer's machine: processor, cores, threads")
    created: datetime
    figures: dict[str, float] = Field(default_factory=dict,
                                      description="the gates it passed at training time, with their margins")
    graphs: dict[str, str] = Field(default_factory=dict,
                                   description="precision -> sha256 of the graph the maintainer's build made from it")


def artifact_dir(name: str, root: Path = TRAINED_DIR) -> Path:
    return root / name


def read_record(name: str, root: Path = TRAINED_DIR) -> TrainedRecord:
    """The record of a shipped artifact, once every file it names matches its hash."""
    folder = artifact_dir(name, root)
    record_path = folder / RECORD_FILE
    if not record_path.is_file():
        raise TrainedArtifactError(f"{record_path} is missing: run scripts/train-models to train {name}")
    record = TrainedRecord.model_validate_json(record_path.read_text(encoding="utf-8"))
    for filename, expected in record.files.items():
        path = folder / filename
        if not path.is_file():
            raise TrainedArtifactError(f"{path} is missing ({RECORD_FILE} lists it)")
        actual = sha256_of(path)
        if actual != expected:
            raise TrainedArtifactError(f"{path}: sha256 {actual[:12]} does not match {RECORD_FILE}'s "
                                       f"{expected[:12]}; restore it from git or retrain with scripts/train-models")
    return record


def read_weights(name: str, root: Path = TRAINED_DIR) -> tuple[TrainedRecord, Tensors]:
    """The record and the weights of a shipped artifact, hashes checked first."""
    from safetensors.numpy import load_file

    record = read_record(name, root)
    return record, {key: np.asarray(value) for key, value in load_file(artifact_dir(name, root) / WEIGHTS_FILE).items()}


def write_artifact(name: str, tensors: Tensors, extra_files: dict[str, Path], record_fields: dict[str, object],
                   root: Path = TRAINED_DIR) -> TrainedRecord:
    """Write weights (and files made beside them) into a fresh folder with a record hashing them all."""
    import shutil

    from safetensors.numpy import save_file

    folder = artifact_dir(name, root)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    # Sorted keys and no metadata: the same tensors always give the same bytes.
    save_file({key: np.ascontiguousarray(tensors[key]) for key in sorted(tensors)}, str(folder / WEIGHTS_FILE))
    for filename, source in extra_files.items():
        shutil.copyfile(source, folder / filename)
    files = {filename: sha256_of(folder / filename) for filename in sorted([WEIGHTS_FILE, *extra_files])}
    record = TrainedRecord.model_validate({"name": name, "files": files, "created": datetime.now(UTC),
                                           "trained_on": machine(), **record_fields})
    (folder / RECORD_FILE).write_text(record.model_dump_json(indent=1) + "\n", encoding="utf-8")
    return record


def library_versions(*distributions: str) -> dict[str, str]:
    return {name: metadata.version(name) for name in distributions}


def machine() -> str:
    import os

    import torch

    return f"{_processor()} ({platform.machine()}), {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"


def _processor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown processor"
