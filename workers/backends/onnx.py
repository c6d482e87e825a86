"""ONNX Runtime backend for registered embedding models (FP32 or INT8).

The graph already does mean pooling and L2 normalisation, so a row out of the session is
the final embedding; this module only tokenizes, runs, and checks the shape. A classification
version (task "classification", e.g. faq-intent) is served unchanged: its graph ends in a
softmax head, so its rows are class probabilities, one column per `manifest.labels` entry.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from workers.backends.base import Encoded, check_rows
from workers.backends.memory import cuda_total_bytes, memory_limit
from workers.registry import ModelManifest, ModelRegistry

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
SUPPORTED_DEVICES = ("cpu", "cuda")

# Inputs the tokenizer can produce, by the names BERT-style graphs use.
_TOKENIZER_FIELDS = ("input_ids", "attention_mask", "token_type_ids")


class DeviceUnavailable(RuntimeError):
    """The requested device cannot run this model here; we never fall back silently."""


class BatchTokenizer:
    """A `tokenizers.Tokenizer` set up to truncate to `max_length`; rows are padded per sub-batch.

    Padding to the longest of a sub-batch (not to a fixed length, as the shipped
    tokenizer.json says) keeps short-query batches cheap. The graph pools over
    attention_mask, so padding never changes an embedding.
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
        self._tokenizer.no_padding()
        self._pad_id = pad_id
        # The Rust tokenizer is shared mutable state behind the Python object; one lock makes
        # concurrent `infer` calls safe for a cost of milliseconds next to the model run.
        self._lock = threading.Lock()
        self.max_length = max_length

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Truncated token ids per text, unpadded: padding is decided per sub-batch."""
        return self.token_rows(texts)[0]

    def token_rows(self, texts: Sequence[str]) -> tuple[list[list[int]], list[bool]]:
        """Token ids per text and whether each text was cut at max_length."""
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts))
        return [encoding.ids for encoding in encodings], [bool(encoding.overflowing) for encoding in encodings]

    def encode(self, texts: Sequence[str], bucket_size: int) -> Encoded:
        """Tokenise and group rows of similar length into sub-batches (see Encoded.group)."""
        if isinstance(texts, str):
            # A bare string is a Sequence[str] too and would embed each character.
            raise TypeError("encode takes a sequence of texts, not a single string")
        rows, truncated = self.token_rows(texts)
        return Encoded.group(rows, bucket_size, self.feeds, truncated=truncated)

    def feeds(self, rows: Sequence[Sequence[int]]) -> dict[str, npt.NDArray[np.int64]]:
        """The model's input arrays for `rows`, padded to the longest of them."""
        longest = max(len(row) for row in rows)
        ids = np.full((len(rows), longest), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), longest), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        columns = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        return {name: columns[name] for name in self._input_names}


GRAPH_OPTIMIZATION = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
WARMUP_TOKENS = (8, 32, 128)


def session_options(intra_op_threads: int, graph_optimization: str = "all", spinning: bool = True) -> ort.SessionOptions:
    if graph_optimization not in GRAPH_OPTIMIZATION:
        raise ValueError(f"graph_optimization {graph_optimization!r}; expected one of {sorted(GRAPH_OPTIMIZATION)}")
    options = ort.SessionOptions()
    options.graph_optimization_level = GRAPH_OPTIMIZATION[graph_optimization]
    # 0 lets ONNX Runtime use one thread per physical core.
    options.intra_op_num_threads = intra_op_threads
    if not spinning:
        # Idle ORT threads otherwise busy-wait for the next batch, taking CPU from the event
        # loop, Kafka and Redis on small machines.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
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


def open_session(model_file: Path, *, device: str, intra_op_threads: int,
                 graph_optimization: str = "all", memory_headroom: float = 0.0,
                 spinning: bool = True) -> ort.InferenceSession:
    providers = providers_for(device)
    options = session_options(intra_op_threads, graph_optimization, spinning)
    provider_options: list[dict[str, str]] = [{} for _ in providers]
    total = cuda_total_bytes() if providers[0] == CUDA_PROVIDER and memory_headroom > 0 else None
    if total is not None:
        provider_options[0]["gpu_mem_limit"] = str(memory_limit(total, memory_headroom))
    session = ort.InferenceSession(str(model_file), options, providers=providers, provider_options=provider_options)
    # ONNX Runtime quietly drops CUDA when its libraries fail to load; a GPU worker that
    # runs on CPU would look healthy while being slow, so refuse instead.
    if session.get_providers()[0] != providers[0]:
        raise DeviceUnavailable(
            f"device {device!r}: ONNX Runtime could not start {providers[0]} "
            f"(session runs on {session.get_providers()}); check the CUDA/cuDNN libraries"
        )
    return session


class OnnxEmbeddingBackend:
    """A registered embedding model version served by ONNX Runtime.

    `encode` (tokenise, group rows of similar length) and `run` (the model) are separate so
    the worker can tokenise the next batch while this one runs; both release the GIL.
    """

    def __init__(self, manifest: ModelManifest, session: ort.InferenceSession, tokenizer: BatchTokenizer,
                 device: str, *, length_bucket_size: int = 16) -> None:
        self.manifest = manifest
        self.device = device
        self.length_bucket_size = length_bucket_size
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
        length_bucket_size: int = 16,
        graph_optimization: str = "all",
        warmup: bool = False,
        memory_headroom: float = 0.0,
        spinning: bool = True,
    ) -> OnnxEmbeddingBackend:
        providers_for(device)  # an impossible device fails before hashing ~100 MB
        # Hashes before the session: a tampered or half-copied model must never be run.
        registry.verify(manifest)
        session = open_session(registry.path_of(manifest, manifest.onnx_file), device=device,
                               intra_op_threads=intra_op_threads, graph_optimization=graph_optimization,
                               memory_headroom=memory_headroom, spinning=spinning)
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
        backend = cls(manifest, session, tokenizer, device, length_bucket_size=length_bucket_size)
        if warmup:
            backend.warm_up()
        return backend

    @property
    def embedding_dim(self) -> int:
        return self.manifest.embedding_dim

    @property
    def max_input_tokens(self) -> int:
        return self._tokenizer.max_length

    def warm_up(self) -> None:
        """Run the common shapes once, so the first real batches do not pay for ORT's first-run setup."""
        rows = max(self.length_bucket_size, 1)
        for tokens in WARMUP_TOKENS:
            length = min(tokens, self.max_input_tokens)
            for count in (1, rows):
                self._session.run([self._output_name], self._tokenizer.feeds([[101] * length] * count))

    def encode(self, texts: Sequence[str]) -> Encoded:
        return self._tokenizer.encode(texts, self.length_bucket_size)

    def run(self, encoded: Encoded) -> npt.NDArray[np.float32]:
        """One row per encoded text, in the order the texts were given."""
        out = np.empty((encoded.count, self.embedding_dim), dtype=np.float32)
        for chunk in encoded.chunks:
            (result,) = self._session.run([self._output_name], chunk.feeds)
            out[chunk.rows] = check_rows(np.asarray(result, dtype=np.float32), len(chunk.rows),
                                         f"{self.manifest.id} on {self.device}")
        return out

    def infer(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.run(self.encode(texts))
