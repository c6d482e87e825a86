"""The wire contract: requests, results and dead letters as msgpack maps.

Field tables and a byte-level example for non-Python producers are in schemas/README.md.
Validation errors name the offending field so a dead letter's reason is actionable.
"""

import secrets
import time
from enum import StrEnum
from typing import Annotated, Any, Self

import msgpack
import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from schemas.bounds import JsonBounds, bound_problems, plain_strings
from schemas.errors import WireError as WireError  # the contract's error, raised here and by schemas/tensors.py
from schemas.packing import F32LE, EmbeddingEncoding, f32le, holds_rows, pack_with_outputs, packb
from schemas.tensors import tensors_as_json

SCHEMA_VERSION = 1

PARAMS_MAX_DEPTH = 8
PARAMS_BOUNDS = JsonBounds(max_depth=PARAMS_MAX_DEPTH)

_NONE: dict[str, Any] = {}  # a missing map: in bounds (never written to)
RequestId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
ModelName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]


def new_request_id() -> str:
    """Random 128-bit id, hex."""
    return secrets.token_hex(16)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    v: int = SCHEMA_VERSION

    def encode(self) -> bytes:
        return msgpack.packb(self.model_dump(mode="python", exclude_none=True), use_bin_type=True)

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        data = unpack_map(raw)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise WireError(_describe(exc)) from exc


def unpack_map(raw: bytes) -> dict[str, Any]:
    """A msgpack map of our schema version, or a WireError saying what it is instead."""
    key_problem: ValueError | None = None
    try:
        data = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except ValueError as exc:
        # The strict read stops at the first key that is not a string, before it has seen the rest:
        # only a lax read of the whole record tells a well-formed one from garbage that opens with a
        # map and an int key. A well-formed one is then judged as any other, and its key last.
        data = _lax(raw) if "for map key" in str(exc) else None
        if data is None:
            raise WireError(f"not msgpack: {type(exc).__name__}: {str(exc)[:200]}", "not_msgpack") from exc
        key_problem = exc
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise WireError(f"not msgpack: {type(exc).__name__}: {str(exc)[:200]}", "not_msgpack") from exc
    if not isinstance(data, dict):
        raise WireError(f"expected a msgpack map, got {type(data).__name__}", "not_a_map")
    version = data.get("v")
    # `1.0 == True == 1` in Python: the type is part of the contract.
    if type(version) is not int or version != SCHEMA_VERSION:
        raise WireError(f"unsupported schema version v={str(version)[:40]!r}; this worker reads v={SCHEMA_VERSION}",
                        "schema_version")
    if key_problem is not None:
        raise WireError(f"invalid fields: a map key is not a string ({str(key_problem)[:60]})") from key_problem
    return data


def _lax(raw: bytes) -> Any:
    """The record read with keys of any type; None when it is not msgpack after all."""
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception:  # msgpack raises several unrelated types for garbage
        return None


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(p) for p in error["loc"]) or "<message>"
        parts.append(f"{field}: {error['msg']}")
    return "invalid fields: " + "; ".join(parts)


class ReplyTo(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    redis: str | None = Field(None, min_length=1, max_length=128, description="Waiter id: reply stream fleet:reply:<id>")
    topic: str | None = Field(None, min_length=1, max_length=249, description="Kafka results topic")


class Request(_Wire):
    """Decoded strictly: no coercion of strings or floats into ints, or of booleans into anything;
    `params` must be plain data (schemas/bounds.py) nested at most PARAMS_MAX_DEPTH deep."""

    id: RequestId
    model: ModelName
    version: str | None = None
    inputs: dict[str, Any]
    params: dict[str, Any] = Field(default_factory=dict)
    reply: ReplyTo = Field(default_factory=ReplyTo)
    deadline_ms: int = Field(gt=0, lt=2**63, description="Epoch ms after which the caller no longer wants the answer")
    priority: int = Field(0, ge=0, le=9)
    submitted_ms: int = Field(gt=0, lt=2**63)  # int64, as every integer of the contract
    debug: bool = False
    tenant: str | None = Field(None, max_length=128)
    embedding_encoding: EmbeddingEncoding | None = Field(
        None, description="`f32le`: the result carries an embedding as raw little-endian float32 bytes; absent: as "
                          "a msgpack array of float 32")
    batch: str | None = Field(None, min_length=1, max_length=64, description="The batch job the request belongs to: "
                              "a worker answers a request of a cancelled job `cancelled` instead of computing it")

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        data = unpack_map(raw)
        # msgpack's strings are valid UTF-8 already: a map of strings (the usual text request) keeps the bounds.
        if not (plain_strings(data.get("inputs", _NONE)) and plain_strings(data.get("params", _NONE))):
            problems = [f"{'.'.join(map(str, (field, *path)))}: {problem}" for field in ("params", "inputs")
                        for path, problem in bound_problems(data.get(field, {}), PARAMS_BOUNDS, limit=3,
                                                            allow_bytes=field == "inputs")]
            if problems:
                raise WireError("invalid fields: " + "; ".join(problems))
        try:
            return cls.model_validate(data, strict=True)
        except ValidationError as exc:
            raise WireError(_describe(exc)) from exc

    @property
    def text(self) -> str:
        """The text input of a text model; a missing or non-string text is a WireError."""
        value = self.inputs.get("text")
        if not isinstance(value, str):
            raise WireError("inputs.text: a string is required", "invalid_input")
        return value


class Status(StrEnum):
    ok = "ok"
    error = "error"
    expired = "expired"
    degraded = "degraded"


class CacheTier(StrEnum):
    miss = "miss"
    exact = "exact"
    semantic = "semantic"


class ErrorInfo(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    code: str
    message: str


class Result(_Wire):
    id: RequestId
    model: str
    version: str | None = None
    status: Status
    outputs: dict[str, Any] | None = None
    error: ErrorInfo | None = None
    cache: CacheTier = CacheTier.miss
    similarity: float | None = Field(None, description="Cosine similarity of the cached input a semantic hit answered from")
    device: str | None = None
    batch_size: int = 0
    timings: dict[str, float] = Field(default_factory=dict, description="Per-stage milliseconds")
    worker: str | None = None
    finished_ms: int = Field(default_factory=now_ms)
    tenant: str | None = Field(None, max_length=128, description="The submitting request's tenant: only it may read "
                               "this result")
    embedding_encoding: EmbeddingEncoding | None = Field(
        None, description="Set when outputs.embedding is not a float array: `f32le`, raw little-endian float32 bytes")

    def encode(self, *, tenant: str | None = None, embedding_encoding: EmbeddingEncoding | None = None) -> bytes:
        """The fields as they are, without `model_dump` (it copies every float of an embedding); an
        embedding held as a numpy row is packed from numpy (schemas/packing.py). Single floats halve
        the size of embeddings on the wire; float32 is what models produce. `tenant` stamps the result
        for that tenant; `embedding_encoding` is what the request asked for."""
        fields = {name: value for name, value in self.__dict__.items() if value is not None}
        if tenant is not None:
            fields["tenant"] = tenant
        if self.error is not None:
            fields["error"] = self.error.model_dump(mode="python", exclude_none=True)
        outputs = fields.get("outputs")
        if outputs is None:
            return packb(fields)
        embedding = outputs.get("embedding")
        if embedding_encoding == F32LE and isinstance(embedding, (np.ndarray, list)):
            fields["embedding_encoding"] = embedding_encoding
            fields["outputs"] = outputs = {**outputs, "embedding": f32le(embedding)}
        if not holds_rows(outputs):
            return packb(fields)
        del fields["outputs"]
        return pack_with_outputs(fields, outputs)

    def as_floats(self) -> "Result":
        """This result with an `f32le` embedding as a list of floats, and a tensor model's outputs as
        nested arrays, for JSON, which has no bytes."""
        if self.outputs is not None and "tensors" in self.outputs:
            return self.model_copy(update={"outputs": tensors_as_json(self.outputs)})
        if self.embedding_encoding != F32LE:
            return self
        row = self.embedding()
        outputs = {**(self.outputs or {}), "embedding": row.tolist() if row is not None else None}
        return self.model_copy(update={"outputs": outputs, "embedding_encoding": None})

    def embedding(self) -> npt.NDArray[np.float32] | None:
        """outputs.embedding as a float32 row, whichever encoding carried it; None without one."""
        value = self.outputs.get("embedding") if self.outputs else None
        if value is None:
            return None
        if self.embedding_encoding == F32LE:
            if not isinstance(value, bytes) or len(value) % 4:
                raise WireError("outputs.embedding: f32le needs bytes, a multiple of 4 long", "invalid_fields")
            return np.frombuffer(value, dtype="<f4").astype(np.float32)
        return np.asarray(value, dtype=np.float32)


class DeadLetter(_Wire):
    reason: str
    code: str = "invalid_fields"
    topic: str
    partition: int
    offset: int
    original: bytes | None = Field(None, description="The original bytes, cut at the worker's cap (see "
                                   "`truncated`); only where the operator allows raw bytes in the DLQ")
    masked: dict[str, Any] | None = Field(None, description="The record decoded, every text masked (None when "
                                          "it was not a msgpack map)")
    original_size: int | None = Field(None, description="Length of the original record value in bytes")
    truncated: bool = Field(False, description="True when `original` holds only the first bytes of the record")
    worker: str | None = None
    time_ms: int = Field(default_factory=now_ms)


class TraceRecord(_Wire):
    """One request recorded by debug mode (on `fleet.trace`), input already redacted."""

    id: str
    model: str
    version: str | None = None
    tenant: str | None = None
    input: str
    status: Status
    outputs: dict[str, Any] | None = None
    error: ErrorInfo | None = None
    batch_size: int = 0
    timings: dict[str, float] = Field(default_factory=dict)
    worker: str | None = None
    reason: str = Field(description="Why it was recorded: request flag, model or tenant switch")
    time_ms: int = Field(default_factory=now_ms)

    def encode(self) -> bytes:
        # outputs as they are: a numpy row in them is packed as floats, not dumped
        return pack_with_outputs(self.model_dump(mode="python", exclude_none=True, exclude={"outputs"}), self.outputs)
