"""ONNX Runtime backend for registered embedding models (FP32 or INT8).

The graph already does mean pooling and L2 normalisation, so a row out of the session is
the final embedding; this module only tokenizes, runs, and checks the shape.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from workers.backends.base import check_rows
from workers.registry import ModelManifest, ModelRegistry

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
SUPPORTED_DEVICES = ("cpu", "cuda")

# Inputs the tokenizer can produce, by the names BERT-style graphs use.
_TOKENIZER_FIELDS = ("input_ids", "attention_mask", "token_type_ids")


class DeviceUnavailable(RuntimeError):
    """The requested device cannot run this model here; we never fall back silently."""


class BatchTokenizer:
    """A `tokenizers.Tokenizer` set up to truncate to `max_length` and pad to the batch's longest.

    Padding to the longest (not to a fixed length, as the shipped tokenizer.json says) keeps
    short-query batches cheap. The graph pools over attention_mask, so padding never changes
    an embedding.
    """

    def __init__(self, tokenizer_file: Path, max_length: int, input_names: Sequence[str]) -> None:
        unknown = [name for name in input_names if name not in _TOKENIZER_FIELDS]
        if unknown:
            raise ValueError(f"model inputs {unknown} are not produced by a tokenizer")
        self._input_names = tuple(input_names)
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        padding = self._tokenizer.padding or {}
        pad_token = str(padding.get("pad_token", "[PAD]"))
        pad_id = self._tokenizer.token_to_id(pad_token)
        if pad_id is None:
            raise ValueError(f"{tokenizer_file}: pad token {pad_token!r} is not in the vocabulary")
        self._tokenizer.enable_truncation(max_length=max_length)
        self._tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token)
        # The Rust tokenizer is shared mutable state behind the Python object; one lock makes
        # concurrent `infer` calls safe for a cost of milliseconds next to the model run.
        self._lock = threading.Lock()
        self.max_length = max_length

    def encode(self, texts: Sequence[str]) -> dict[str, npt.NDArray[np.int64]]:
        """The model's input arrays, each (len(texts), longest), int64."""
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts))
        columns = {
            "input_ids": [encoding.ids for encoding in encodings],
            "attention_mask": [encoding.attention_mask for encoding in encodings],
            "token_type_ids": [encoding.type_ids for encoding in encodings],
        }
        return {name: np.asarray(columns[name], dtype=np.int64) for name in self._input_names}


def session_options(intra_op_threads: int) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # 0 lets ONNX Runtime use one thread per physical core.
    options.intra_op_num_threads = intra_op_threads
    return options


def providers_for(device: str) -> list[str]:
    """Execution providers for `device`, or DeviceUnavailable when this install cannot serve it."""
    if device == "cpu":
        return [CPU_PROVIDER]
    if device == "cuda":
        available = ort.get_available_providers()
        if CUDA_PROVIDER not in available:
            raise DeviceUnavailable(
                f"device 'cuda' requested but this ONNX Runtime ({ort.__version__}) only has "
                f"{available}; install onnxruntime-gpu (the project's [gpu] extra) or run with device=cpu"
            )
        return [CUDA_PROVIDER, CPU_PROVIDER]
    raise ValueError(f"unknown device {device!r}; expected one of {SUPPORTED_DEVICES}")


def open_session(model_file: Path, *, device: str, intra_op_threads: int) -> ort.InferenceSession:
    providers = providers_for(device)
    session = ort.InferenceSession(str(model_file), session_options(intra_op_threads), providers=providers)
    # ONNX Runtime quietly drops CUDA when its libraries fail to load; a GPU worker that
    # runs on CPU would look healthy while being slow, so refuse instead.
    if session.get_providers()[0] != providers[0]:
        raise DeviceUnavailable(
            f"device {device!r}: ONNX Runtime could not start {providers[0]} "
            f"(session runs on {session.get_providers()}); check the CUDA/cuDNN libraries"
        )
    return session


class OnnxEmbeddingBackend:
    """A registered embedding model version served by ONNX Runtime."""

    def __init__(
        self,
        manifest: ModelManifest,
        session: ort.InferenceSession,
        tokenizer: BatchTokenizer,
        device: str,
    ) -> None:
        self.manifest = manifest
        self.device = device
        self._session = session
        self._tokenizer = tokenizer
        self._output_name = manifest.outputs[0].name

    @classmethod
    def load(
        cls,
        registry: ModelRegistry,
        manifest: ModelManifest,
        *,
        device: str = "cpu",
        intra_op_threads: int = 0,
        max_input_tokens: int = 256,
    ) -> OnnxEmbeddingBackend:
        providers_for(device)  # an impossible device fails before hashing ~100 MB
        # Hashes before the session: a tampered or half-copied model must never be run.
        registry.verify(manifest)
        session = open_session(
            registry.path_of(manifest, manifest.onnx_file), device=device, intra_op_threads=intra_op_threads
        )
        declared = [spec.name for spec in manifest.inputs]
        actual = [node.name for node in session.get_inputs()]
        if sorted(declared) != sorted(actual):
            raise ValueError(f"{manifest.id}: manifest declares inputs {declared}, graph has {actual}")
        # The graph's position table ends at the manifest's max_length; never feed more.
        tokenizer = BatchTokenizer(
            registry.path_of(manifest, manifest.tokenizer_file),
            max_length=min(max_input_tokens, manifest.max_length),
            input_names=declared,
        )
        return cls(manifest, session, tokenizer, device)

    @property
    def embedding_dim(self) -> int:
        return self.manifest.embedding_dim

    @property
    def max_input_tokens(self) -> int:
        return self._tokenizer.max_length

    def infer(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if isinstance(texts, str):
            # A bare string is a Sequence[str] too and would embed each character.
            raise TypeError("infer takes a sequence of texts, not a single string")
        if len(texts) == 0:
            return np.zeros((0, self.embedding_dim), dtype=np.float32)
        feeds = self._tokenizer.encode(texts)
        (result,) = self._session.run([self._output_name], feeds)
        rows = np.ascontiguousarray(result, dtype=np.float32)
        return check_rows(rows, len(texts), f"{self.manifest.id} on {self.device}")
