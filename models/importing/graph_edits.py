"""Edits that make an ONNX text graph exported elsewhere the standard graph the workers serve, and
the same edits in numpy on the original file's answers: the reference the edited graph is checked on.

They are made to the staged copy at import, so the registered version is an ordinary graph (the
tokenizer's input names, one output, pooled and normalised where asked) and no worker needs to
know it was edited:

- inputs: a renamed input becomes a new graph input under the tokenizer's name, joined to its old
  name by an Identity, so nothing inside the graph (subgraphs included) has to be renamed;
- outputs: only the chosen one stays, and what fed only the others is pruned (never computed);
- pooling: mean over the attention mask (padding excluded; a graph without a mask input gets one)
  or the first token; normalize: x / max(||x||, 1e-12). Both as sentence-transformers computes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from models.importing.converted import Pooling, Reference
from models.importing.errors import ImportRefused
from models.importing.samples import Arrays

MASK_INPUT = "attention_mask"
IDS_INPUT = "input_ids"
POOLED_OUTPUT = "embedding"
MEAN_EPSILON = 1e-9  # the token count's floor (sentence-transformers: clamp(min=1e-9))
NORM_EPSILON = 1e-12  # the norm's floor (torch.nn.functional.normalize's eps)
# From opset 13 ReduceSum and Unsqueeze take their axes as an input; before, as an attribute.
AXES_INPUT_OPSET = 13
# The oldest opset the appended nodes are written for (Max with broadcasting, Gather with a scalar
# index, the attribute forms of ReduceSum and Unsqueeze); exporters of the last years write 11 or later.
MIN_OPSET = 11


@dataclass(frozen=True)
class GraphEdits:
    renames: dict[str, str] = field(default_factory=dict)  # graph input -> the tokenizer's name for it
    output: str | None = None  # keep only this output (None: the outputs as they are)
    pooling: Pooling | None = None
    normalize: bool = False


def edit_graph(onnx_path: Path, edits: GraphEdits) -> list[str]:
    """Apply `edits` to the graph file in place; what was done, one line each (empty: nothing)."""
    model = onnx.load(str(onnx_path))
    graph = model.graph
    done = [_rename_input(graph, old, new) for old, new in edits.renames.items()]
    if edits.output is not None and [value.name for value in graph.output] != [edits.output]:
        _keep_only_output(graph, edits.output)
        done.append(f"kept only output {edits.output!r}")
    if edits.pooling is not None or edits.normalize:
        done += _append_head(model, edits)
    if done:
        _prune(graph)
        onnx.checker.check_model(model)
        onnx.save(model, str(onnx_path))
    return done


def _value_names(graph: onnx.GraphProto) -> set[str]:
    names = {value.name for value in (*graph.input, *graph.output, *graph.value_info, *graph.initializer)}
    names.update(name for node in graph.node for name in (*node.input, *node.output))
    return names


def _rename_input(graph: onnx.GraphProto, old: str, new: str) -> str:
    if new in _value_names(graph):
        raise ImportRefused(f"--input {new}={old}: the graph already has a value named {new!r}")
    (value,) = [value for value in graph.input if value.name == old]
    value.name = new
    nodes = [helper.make_node("Identity", [new], [old], name=f"import_input_{new}"), *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    return f"input {old!r} renamed {new!r}"


def _keep_only_output(graph: onnx.GraphProto, name: str) -> None:
    kept = [value for value in graph.output if value.name == name]
    del graph.output[:]
    graph.output.extend(kept)


def _append_head(model: onnx.ModelProto, edits: GraphEdits) -> list[str]:
    """Pooling and/or normalisation after the (only) output; the result becomes the graph's output."""
    graph = model.graph
    (source,) = graph.output
    builder = _Builder(graph, _opset(model))
    rows, done = source.name, []
    if edits.pooling == "mean":
        rows = builder.mean_over_mask(rows, _mask_input(graph))
        done.append(f"mean pooling of {source.name!r} over {MASK_INPUT} appended")
    elif edits.pooling == "cls":
        rows = builder.first_token(rows)
        done.append(f"first-token (CLS) pooling of {source.name!r} appended")
    if edits.normalize:
        rows = builder.l2_normalized(rows)
        done.append("L2 normalisation appended")
    final = builder.fresh(POOLED_OUTPUT)
    graph.node[-1].output[0] = final  # the last appended node gives the result: name it as the output
    dims = source.type.tensor_type.shape.dim
    output = helper.make_tensor_value_info(final, TensorProto.FLOAT, None)
    for dim in (dims[0], dims[len(dims) - 1]):
        output.type.tensor_type.shape.dim.add().CopyFrom(dim)
    del graph.output[:]
    graph.output.append(output)
    return done


def _opset(model: onnx.ModelProto) -> int:
    versions = [entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")]
    if not versions or versions[0] < MIN_OPSET:
        raise ImportRefused(f"--pooling/--normalize append ONNX operators of opset {MIN_OPSET} or later; the graph "
                            f"uses opset {versions[0] if versions else '(none)'}: re-export it at a newer opset")
    return versions[0]


def _mask_input(graph: onnx.GraphProto) -> str:
    """The graph's attention mask input; one is added (shaped as input_ids) where the graph takes none."""
    if any(value.name == MASK_INPUT for value in graph.input):
        return MASK_INPUT
    if MASK_INPUT in _value_names(graph):
        raise ImportRefused(f"mean pooling needs an {MASK_INPUT} input, and the graph uses that name for another "
                            "value")
    (ids,) = [value for value in graph.input if value.name == IDS_INPUT]
    mask = onnx.ValueInfoProto()
    mask.CopyFrom(ids)
    mask.name = MASK_INPUT
    graph.input.append(mask)
    return MASK_INPUT


class _Builder:
    """Appends nodes to a graph under names it does not use yet, in the graph's own opset."""

    def __init__(self, graph: onnx.GraphProto, opset: int) -> None:
        self._graph = graph
        self._opset = opset
        self._taken = _value_names(graph)

    def fresh(self, stem: str) -> str:
        name, number = stem, 0
        while name in self._taken:  # SSA: a name is produced once
            number += 1
            name = f"{stem}_{number}"
        self._taken.add(name)
        return name

    def node(self, op: str, inputs: list[str], **attributes: object) -> str:
        output = self.fresh(f"import_{op.lower()}")
        self._graph.node.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    def constant(self, value: npt.NDArray[np.generic]) -> str:
        return self.node("Constant", [], value=numpy_helper.from_array(value))

    def along(self, op: str, source: str, axes: list[int], **attributes: object) -> str:
        """ReduceSum or Unsqueeze on `axes`, written the way the graph's opset takes them."""
        if self._opset >= AXES_INPUT_OPSET:
            return self.node(op, [source, self.constant(np.asarray(axes, dtype=np.int64))], **attributes)
        return self.node(op, [source], axes=axes, **attributes)

    def mean_over_mask(self, tokens: str, mask: str) -> str:
        weights = self.along("Unsqueeze", self.node("Cast", [mask], to=TensorProto.FLOAT), [2])
        summed = self.along("ReduceSum", self.node("Mul", [tokens, weights]), [1], keepdims=0)
        counted = self.along("ReduceSum", weights, [1], keepdims=0)
        floor = self.constant(np.asarray(MEAN_EPSILON, dtype=np.float32))
        return self.node("Div", [summed, self.node("Max", [counted, floor])])

    def first_token(self, tokens: str) -> str:
        return self.node("Gather", [tokens, self.constant(np.asarray(0, dtype=np.int64))], axis=1)

    def l2_normalized(self, rows: str) -> str:
        norm = self.node("Sqrt", [self.along("ReduceSum", self.node("Mul", [rows, rows]), [1], keepdims=1)])
        floor = self.constant(np.asarray(NORM_EPSILON, dtype=np.float32))
        return self.node("Div", [rows, self.node("Max", [norm, floor])])


def _subgraph_inputs(node: onnx.NodeProto) -> Iterator[str]:
    """Every name the subgraphs of `node` (If, Loop, Scan) read: outer-scope values among them."""
    for attribute in node.attribute:
        for graph in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
            for inner in graph.node:
                yield from inner.input
                yield from _subgraph_inputs(inner)


def _prune(graph: onnx.GraphProto) -> None:
    """Drop the nodes and initializers no output needs any more (graph inputs all stay)."""
    needed = {value.name for value in graph.output}
    kept: list[onnx.NodeProto] = []
    for node in reversed(graph.node):
        if any(name in needed for name in node.output):
            kept.append(node)
            needed.update(node.input)
            needed.update(_subgraph_inputs(node))
    del graph.node[:]
    graph.node.extend(reversed(kept))
    inputs = {value.name for value in graph.input}  # an initializer listed as an input is a default: kept
    initializers = [tensor for tensor in graph.initializer if tensor.name in needed or tensor.name in inputs]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    produced = {name for node in graph.node for name in node.output}
    value_info = [value for value in graph.value_info if value.name in produced]
    del graph.value_info[:]
    graph.value_info.extend(value_info)


def pooled_rows(tokens: npt.NDArray[np.floating], mask: npt.NDArray[np.integer], pooling: Pooling
                ) -> npt.NDArray[np.float32]:
    """What the appended pooling nodes compute, in numpy."""
    if pooling == "cls":
        return np.asarray(tokens[:, 0], dtype=np.float32)
    weights = mask[..., None].astype(np.float32)
    return np.asarray((tokens * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), MEAN_EPSILON),
                      dtype=np.float32)


def l2_normalized_rows(rows: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
    """What the appended normalisation nodes compute, in numpy."""
    norms = np.sqrt((rows * rows).sum(axis=1, keepdims=True))
    return np.asarray(rows / np.maximum(norms, NORM_EPSILON), dtype=np.float32)


def reference_on_original(original: Path, edits: GraphEdits, output: str, served_as: str) -> Reference:
    """ONNX Runtime on the file as it was given (its own input names, the chosen output), pooled and
    normalised in numpy: what the edited graph's output `served_as` must give."""
    session = ort.InferenceSession(str(original), providers=["CPUExecutionProvider"])
    original_inputs = [value.name for value in session.get_inputs()]

    def run(feeds: Arrays) -> Arrays:
        taken = {name: feeds[edits.renames.get(name, name)] for name in original_inputs}
        (rows,) = session.run([output], taken)
        if edits.pooling is not None:
            rows = pooled_rows(rows, feeds[MASK_INPUT], edits.pooling)
        if edits.normalize:
            rows = l2_normalized_rows(rows)
        return {served_as: np.asarray(rows)}

    return run
