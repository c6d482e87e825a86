"""A model card: what a served model version takes and gives, for readers that never load it.

The gateway may not import models/ (it never runs a model), yet it checks requests against
the model (a tensor request's names, dtypes and shapes) and answers metadata routes (the Open
Inference Protocol's `GET /v2/models/{name}`). Workers write the card of every version they
serve to Redis (`card_key`); common/model_cards.py reads it. Datatypes use the Open Inference
Protocol's names (FP32, INT64, BYTES...), shapes -1 for a variable axis.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.tasks import Task

CARD_VERSION = 1

# numpy dtype name -> Open Inference Protocol datatype; BYTES is a text's.
OIP_DATATYPES: Final[dict[str, str]] = {
    "bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
    "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
    "float16": "FP16", "float32": "FP32", "float64": "FP64", "object": "BYTES", "str": "BYTES",
}
NUMPY_DTYPES: Final[dict[str, str]] = {oip: numpy for numpy, oip in OIP_DATATYPES.items() if numpy not in ("object", "str")}
VARIABLE = -1


def oip_datatype(numpy_dtype: str) -> str:
    """The Open Inference Protocol name of a numpy dtype name; ValueError for one it has none for."""
    try:
        return OIP_DATATYPES[numpy_dtype]
    except KeyError:
        raise ValueError(f"dtype {numpy_dtype!r} has no Open Inference Protocol datatype") from None


class CardTensor(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    datatype: str = Field(description="Open Inference Protocol datatype: FP32, INT64, BYTES...")
    shape: tuple[int, ...] = Field(description="Axis sizes; -1 where the axis varies (always the first, the batch)")
    allow_nan: bool = Field(False, description="Float inputs of a tensor model: NaN and infinities accepted")

    @property
    def numpy_dtype(self) -> str | None:
        """The numpy dtype name of a numeric datatype; None for BYTES."""
        return NUMPY_DTYPES.get(self.datatype)


class ModelCard(BaseModel):
    """One version of one model as callers see it. Text tasks take `text` (rerank: `query` and
    `passages`) and their inputs here are the graph's token tensors, for the record; a tensor
    model's inputs are what requests carry."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int = CARD_VERSION
    name: str
    version: str
    task: Task
    platform: str = Field("onnxruntime", description="What runs the graph")
    inputs: tuple[CardTensor, ...]
    outputs: tuple[CardTensor, ...]
    labels: tuple[str, ...] = ()
    max_length: int | None = Field(None, description="Text tasks: tokens a text is cut at")
    written_ms: int = Field(0, description="When a worker last wrote the card (epoch ms)")

    def encode(self) -> bytes:
        return self.model_dump_json().encode()

    @classmethod
    def decode(cls, raw: bytes | str) -> ModelCard | None:
        """The card in `raw`, or None when it is not one of this card version (never an exception:
        a reader falls back to not knowing the model)."""
        try:
            card = cls.model_validate_json(raw)
        except (ValidationError, ValueError):
            return None
        return card if card.v == CARD_VERSION else None

    def input(self, name: str) -> CardTensor | None:
        return next((spec for spec in self.inputs if spec.name == name), None)
