"""ONNX Runtime backends for the text tasks whose rows are not one per text:

- `rerank`: a cross-encoder scoring (query, passage) pairs. A request is a query and its
  passages; each pair is a model row, so one request is several rows of a batch, and its answer
  is the scores of its passages in order.
- `token-classification`: a score per label for every token. A request's answer is its tokens'
  label probabilities with the characters each token covers, which the task turns into spans.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from models.backends.encodings import RowsOfRequests, TaskTokenizer
from models.backends.onnx import open_version_session
from models.backends.options import RuntimeOptions
from models.registry import ModelManifest, ModelRegistry
from models.tasks.token_classification import TokenScores
from schemas.task_inputs import RerankInput

# Padded tokens a session run takes at most, on a CPU. Measured on the 2-core CI machine (one
# intra-op thread, the MiniLM-sized `scripts/bench tasks` reranker, process CPU per request of 8
# passages): batches of 32 requests cost 56.9 ms a request in runs of up to 16 pairs (up to 1,650
# tokens) and 51 to 53 ms with runs bounded at 192 to 512 tokens; one request at a time, 61.7 ms.
# Bigger runs' activations (1,536 floats a token in the feed-forward layers) outgrow a core's L2
# cache. A GPU wants the biggest runs it can get: no bound there.
CPU_TOKENS_PER_RUN = 384


def tokens_per_run(device: str) -> int:
    """The padded-token bound of one session run on `device`; 0: none."""
    return CPU_TOKENS_PER_RUN if device == "cpu" else 0


def _softmax(logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (shifted / shifted.sum(axis=-1, keepdims=True)).astype(np.float32)


class _OnnxTextTaskBackend:
    def __init__(self, manifest: ModelManifest, session: ort.InferenceSession, tokenizer: TaskTokenizer,
                 device: str, *, length_bucket_size: int, tokens_per_run: int = 0) -> None:
        self.manifest = manifest
        self.device = device
        self.length_bucket_size = length_bucket_size
        self.tokens_per_run = tokens_per_run
        self._session = session
        self._tokenizer = tokenizer
        self._output = manifest.outputs[0].name

    @classmethod
    def load(cls, registry: ModelRegistry, manifest: ModelManifest,
             options: RuntimeOptions = RuntimeOptions()) -> _OnnxTextTaskBackend:
        session = open_version_session(registry, manifest, options)
        tokenizer = TaskTokenizer.of(registry, manifest, options.max_input_tokens)
        return cls(manifest, session, tokenizer, options.device, length_bucket_size=options.length_bucket_size,
                   tokens_per_run=tokens_per_run(options.device))

    def _rows(self, encoded: RowsOfRequests) -> list[npt.NDArray[np.float32]]:
        """The first output's row for every model row, in row order."""
        rows: list[npt.NDArray[np.float32] | None] = [None] * len(encoded.encodings)
        for chunk in encoded.chunks:
            (result,) = self._session.run([self._output], chunk.feeds)
            result = np.asarray(result, dtype=np.float32)
            if result.shape[0] != len(chunk.rows):
                raise ValueError(f"{self.manifest.id}: {result.shape[0]} rows out for {len(chunk.rows)} in")
            for position, row in enumerate(chunk.rows.tolist()):
                rows[row] = result[position]
        return rows  # type: ignore[return-value]


class OnnxRerankBackend(_OnnxTextTaskBackend):
    def encode(self, items: Sequence[RerankInput]) -> RowsOfRequests:
        pairs = [(item.query, passage) for item in items for passage in item.passages]
        return self._tokenizer.encode(pairs, [len(item.passages) for item in items], self.length_bucket_size,
                                      self.tokens_per_run)

    def run(self, encoded: RowsOfRequests) -> list[npt.NDArray[np.float32]]:
        """Each request's passage scores, in the order of its passages."""
        scores = np.asarray([float(np.ravel(row)[0]) for row in self._rows(encoded)], dtype=np.float32)
        answers, start = [], 0
        for count in encoded.counts:
            answers.append(scores[start:start + count])
            start += count
        return answers

    def infer(self, items: Sequence[RerankInput]) -> list[npt.NDArray[np.float32]]:
        return self.run(self.encode(items))


class OnnxTokenClassificationBackend(_OnnxTextTaskBackend):
    def encode(self, texts: Sequence[str]) -> RowsOfRequests:
        if isinstance(texts, str):
            raise TypeError("encode takes a sequence of texts, not a single string")
        return self._tokenizer.encode(list(texts), [1] * len(texts), self.length_bucket_size, self.tokens_per_run)

    def run(self, encoded: RowsOfRequests) -> list[TokenScores]:
        answers = []
        for encoding, logits in zip(encoded.encodings, self._rows(encoded), strict=True):
            real = [i for i, special in enumerate(encoding.special_tokens_mask[:len(encoding.ids)]) if not special]
            probabilities = _softmax(logits[:len(encoding.ids)])[real]
            answers.append(TokenScores(probabilities, tuple(encoding.offsets[i] for i in real)))
        return answers

    def infer(self, texts: Sequence[str]) -> list[TokenScores]:
        return self.run(self.encode(texts))
