"""The `tensor` task: any ONNX graph, named tensors in and out (schemas/tensors.py).

A request carries one or more rows of every input; the backend (models/backends/tensor.py)
stacks requests along the first axis, in groups of equal other axes, and hands each request
its own rows of every output. The exact cache keys the bytes themselves; a near input's
answer is never served (no semantic cache): nothing says two tensors close in some metric
have the same answer.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from models.cards import card_of
from models.manifest import ModelManifest
from models.tasks.base import Agreement, Outputs, Parsed
from schemas.model_card import CardTensor
from schemas.task_inputs import TensorInput, tensors_of
from schemas.tasks import Task
from schemas.tensors import Array, decode_tensor, encode_tensor
from schemas.wire import Request

# Specs per version id: parsing every request must not rebuild them; bounded by the versions a worker holds.
_MAX_REMEMBERED = 64


def _key(arrays: dict[str, Array]) -> str:
    digest = hashlib.blake2b(digest_size=16, person=b"fleet.tensor.v1")
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}\x00{array.dtype.str}\x00{array.shape}\x00".encode())
        digest.update(array.tobytes())
    return "tensor:" + digest.hexdigest()


def _summary(arrays: dict[str, Array]) -> str:
    return ", ".join(f"{name} {array.dtype}{list(array.shape)}" for name, array in arrays.items())


class TensorTask:
    name: Task = "tensor"
    semantic_cache = False

    def __init__(self) -> None:
        self._specs: dict[str, tuple[CardTensor, ...]] = {}

    def specs(self, manifest: ModelManifest) -> tuple[CardTensor, ...]:
        specs = self._specs.get(manifest.id)
        if specs is None:
            if len(self._specs) >= _MAX_REMEMBERED:
                self._specs.clear()
            specs = self._specs[manifest.id] = card_of(manifest).inputs
        return specs

    def parse(self, request: Request, manifest: ModelManifest, *, max_chars: int) -> Parsed:
        parsed = tensors_of(request.inputs, self.specs(manifest))
        return Parsed(_summary(parsed.arrays)[:max_chars], parsed, _key(parsed.arrays))

    def outputs(self, manifest: ModelManifest, answer: dict[str, Array]) -> dict[str, Any]:
        return {"tensors": {name: encode_tensor(array) for name, array in answer.items()}}

    def compare(self, live: Outputs, shadow: Outputs, *, threshold: float) -> Agreement:
        """Agreed when every output's max abs difference is within `threshold`; score: the largest."""
        live_tensors, shadow_tensors = live.get("tensors"), shadow.get("tensors")
        if not isinstance(live_tensors, dict) or not isinstance(shadow_tensors, dict) \
                or sorted(live_tensors) != sorted(shadow_tensors):
            raise ValueError(f"incomparable outputs: live has {sorted(live)}, shadow has {sorted(shadow)}")
        worst = 0.0
        for name, value in live_tensors.items():
            a = decode_tensor(value, name).astype(np.float64)
            b = decode_tensor(shadow_tensors[name], name).astype(np.float64)
            if a.shape != b.shape:
                raise ValueError(f"output {name}: live shape {list(a.shape)}, shadow shape {list(b.shape)}")
            if a.size:
                worst = max(worst, float(np.nanmax(np.abs(a - b))))
        return Agreement(worst <= threshold, worst)

    def probe(self, manifest: ModelManifest) -> TensorInput:
        arrays = {spec.name: np.zeros(tuple(1 if axis < 0 else axis for axis in spec.shape), dtype=spec.numpy_dtype)
                  for spec in self.specs(manifest)}
        return TensorInput(arrays, 1)
