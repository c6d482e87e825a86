"""A version's model card (schemas/model_card.py) from its manifest: what the gateway checks
requests against and what metadata routes describe, without loading the model."""

from __future__ import annotations

from models.manifest import ModelManifest, TensorSpec
from schemas.model_card import VARIABLE, CardTensor, ModelCard, oip_datatype


def _tensor(spec: TensorSpec) -> CardTensor:
    return CardTensor(name=spec.name, datatype=oip_datatype(spec.dtype),
                      shape=tuple(axis if isinstance(axis, int) else VARIABLE for axis in spec.shape),
                      allow_nan=spec.allow_nan)


def card_of(manifest: ModelManifest, *, written_ms: int = 0) -> ModelCard:
    return ModelCard(name=manifest.name, version=manifest.id, task=manifest.task,
                     inputs=tuple(map(_tensor, manifest.inputs)), outputs=tuple(map(_tensor, manifest.outputs)),
                     labels=manifest.labels, max_length=manifest.max_length, written_ms=written_ms)
