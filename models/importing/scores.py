"""Make an imported text graph's first output what its task serves: probabilities for a classifier,
logits for a token classifier (the token-classification backend applies the softmax itself).

ONNX files come either way: a classifier exported without its softmax returns logits, a token
classifier exported with one returns probabilities. The import looks at the rows the graph
returns for the sample texts and, where they are the other kind, appends one node: Softmax, or
Log (softmax(log p) = p, so the backend's softmax gives the graph's own probabilities back).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from onnx import helper

from models.importing.converted import Reference
from models.importing.samples import Arrays, Samples

# Rows of probabilities: non-negative and summing to 1 within float32 rounding.
_SUM_TOLERANCE = 1e-3


def are_probabilities(rows: npt.NDArray[np.floating]) -> bool:
    return bool(np.all(rows >= 0) and np.allclose(rows.sum(axis=-1), 1.0, atol=_SUM_TOLERANCE))


@dataclass(frozen=True)
class ScoresFit:
    """The node appended to the first output, and why."""

    op: Literal["Softmax", "Log"]
    output: str  # the graph's first output now
    why: str

    def apply(self, rows: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
        """What the appended node computes, in numpy."""
        if self.op == "Log":
            return np.asarray(np.log(rows), dtype=np.float32)
        exponentials = np.exp(rows - rows.max(axis=-1, keepdims=True))
        return np.asarray(exponentials / exponentials.sum(axis=-1, keepdims=True), dtype=np.float32)

    def after(self, reference: Reference) -> Reference:
        """`reference` (the first output before the node) followed by the node, for the check."""
        def fitted(feeds: Arrays) -> Arrays:
            (rows,) = reference(feeds).values()
            return {self.output: self.apply(rows.astype(np.float32))}

        return fitted


def fit_scores_to_task(onnx_path: Path, task: str, samples: Samples) -> ScoresFit | None:
    """Append Softmax or Log to the first output where the task needs it; what was done, or None."""
    if task not in ("classification", "token-classification"):
        return None
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    first = session.get_outputs()[0].name
    rows = np.asarray(session.run([first], samples.feeds(list(range(samples.count))))[0], dtype=np.float64)
    probabilities = are_probabilities(rows)
    if task == "classification" and not probabilities:
        return ScoresFit("Softmax", _append(onnx_path, "Softmax", "probabilities", axis=-1), "Softmax appended: the "
                         "graph returned logits, the classification task serves probabilities")
    if task == "token-classification" and probabilities:
        return ScoresFit("Log", _append(onnx_path, "Log", "logits"), "Log appended: the graph returned "
                         "probabilities, the token-classification backend takes logits")
    return None


def _append(onnx_path: Path, op: str, new_name: str, **attributes: int) -> str:
    model = onnx.load(str(onnx_path))
    output = model.graph.output[0]
    taken = {value.name for value in (*model.graph.input, *model.graph.output, *model.graph.initializer)}
    taken.update(name for node in model.graph.node for name in node.output)
    name = new_name
    while name in taken:  # SSA: a name is produced once
        name = f"{output.name}_{name}"
    model.graph.node.append(helper.make_node(op, [output.name], [name], name=f"import_{op.lower()}", **attributes))
    appended = onnx.ValueInfoProto()
    appended.CopyFrom(output)
    appended.name = name
    model.graph.output.remove(output)
    model.graph.output.insert(0, appended)
    onnx.checker.check_model(model)
    onnx.save(model, str(onnx_path))
    return name
