"""Make an imported text graph's first output what its task serves: probabilities for a classifier,
logits for a token classifier (the token-classification backend applies the softmax itself).

ONNX files come either way: a classifier exported without its softmax returns logits, a token
classifier exported with one returns probabilities. The import looks at the rows the graph
returns for the sample texts and, where they are the other kind, appends one node: Softmax, or
Log (softmax(log p) = p, so the backend's softmax gives the graph's own probabilities back).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from onnx import helper

from models.importing.samples import Samples

# Rows of probabilities: non-negative and summing to 1 within float32 rounding.
_SUM_TOLERANCE = 1e-3


def are_probabilities(rows: npt.NDArray[np.floating]) -> bool:
    return bool(np.all(rows >= 0) and np.allclose(rows.sum(axis=-1), 1.0, atol=_SUM_TOLERANCE))


def fit_scores_to_task(onnx_path: Path, task: str, samples: Samples) -> str | None:
    """Append Softmax or Log to the first output where the task needs it; what was done, or None."""
    if task not in ("classification", "token-classification"):
        return None
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    first = session.get_outputs()[0].name
    rows = np.asarray(session.run([first], samples.feeds(list(range(samples.count))))[0], dtype=np.float64)
    probabilities = are_probabilities(rows)
    if task == "classification" and not probabilities:
        _append(onnx_path, "Softmax", "probabilities", axis=-1)
        return "Softmax appended: the graph returned logits, the classification task serves probabilities"
    if task == "token-classification" and probabilities:
        _append(onnx_path, "Log", "logits")
        return "Log appended: the graph returned probabilities, the token-classification backend takes logits"
    return None


def _append(onnx_path: Path, op: str, new_name: str, **attributes: int) -> None:
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
