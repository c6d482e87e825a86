"""Small ONNX files shaped like the text exports teams find in public packages, and a word-level
tokenizer for them: made with onnx.helper and tokenizers in milliseconds, no model weights needed.

The messy export mimics a paraphrase-MiniLM file: inputs named `ids` and `mask`, and several
outputs, the first `output` [batch, sequence], then a pooler-like `461` [batch, width] and the
token vectors `last_hidden_state` [batch, sequence, width]. Token vectors depend on their own
token only, so padding never changes a real token's vector (as in a real encoder's mask).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, pre_tokenizers

from models.build.sentences import CHECK_SENTENCES

WIDTH = 8
MAX_LENGTH = 32
SEED = 41
SPECIAL = ("[PAD]", "[UNK]")


def write_tokenizer(folder: Path) -> Path:
    """A word-level tokenizer.json over the check sentences' words ([PAD] is 0), with its max length."""
    folder.mkdir(parents=True, exist_ok=True)
    words = sorted({word for sentence in CHECK_SENTENCES for word in re.findall(r"\w+|[^\w\s]", sentence)})
    vocab = {token: index for index, token in enumerate((*SPECIAL, *words))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": MAX_LENGTH}))
    return folder / "tokenizer.json"


def vocabulary_size(tokenizer_file: Path) -> int:
    return int(Tokenizer.from_file(str(tokenizer_file)).get_vocab_size())


def _weights(name: str, *shape: int) -> onnx.TensorProto:
    rng = np.random.default_rng([SEED, len(name), *shape])
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def _save(graph: onnx.GraphProto, path: Path, opset: int) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset < 15 else 8  # as exporters of that opset write; ONNX Runtime reads both
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _scalar(name: str, value: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=np.int64), name)


def messy_export(path: Path, vocabulary: int, *, opset: int = 17, with_mask: bool = True) -> Path:
    """The paraphrase-MiniLM-like file: `ids` (and `mask`) in; output, 461, last_hidden_state out."""
    tokens = ["batch", "sequence"]
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, tokens)]
    # A mask input the graph takes but its token vectors do not need, as in a file traced with one.
    inputs += [helper.make_tensor_value_info("mask", TensorProto.INT64, tokens)] if with_mask else []
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["embedded"]),
        helper.make_node("MatMul", ["embedded", "mix"], ["mixed"]),
        helper.make_node("Tanh", ["mixed"], ["last_hidden_state"]),
        helper.make_node("Gather", ["last_hidden_state", "zero"], ["output"], axis=2),
        helper.make_node("Gather", ["last_hidden_state", "zero"], ["first"], axis=1),
        helper.make_node("MatMul", ["first", "pool"], ["pooled"]),
        helper.make_node("Tanh", ["pooled"], ["461"]),
    ]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, tokens),
               helper.make_tensor_value_info("461", TensorProto.FLOAT, ["batch", WIDTH]),
               helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [*tokens, WIDTH])]
    initializers = [_weights("table", vocabulary, WIDTH), _weights("mix", WIDTH, WIDTH),
                    _weights("pool", WIDTH, WIDTH), _scalar("zero", 0)]
    return _save(helper.make_graph(nodes, "messy", inputs, outputs, initializers), path, opset)


def classifier_export(path: Path, vocabulary: int, labels: int) -> Path:
    """A classifier whose logits [batch, labels] come second, after its token vectors."""
    tokens = ["batch", "sequence"]
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, tokens)]
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["hidden"]),
        helper.make_node("Gather", ["hidden", "zero"], ["first"], axis=1),
        helper.make_node("MatMul", ["first", "head"], ["logits"]),
    ]
    outputs = [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [*tokens, WIDTH]),
               helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", labels])]
    initializers = [_weights("table", vocabulary, WIDTH), _weights("head", WIDTH, labels), _scalar("zero", 0)]
    return _save(helper.make_graph(nodes, "classifier", inputs, outputs, initializers), path, 17)
