"""An ONNX graph a team already exported: copied as it is, its task read from its signature.

With token inputs (input_ids, ...) and a tokenizer beside it, it is a text model: a rank-3
first output is token classification, labels make it a classifier, else an embedding model
(a reranker must be asked for with --task rerank). Anything else is a tensor model. A text
graph's scores are fitted to its task (`models.importing.scores`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx

from models.importing.converted import ONNX_FILE, Converted, ImportRequest, ImportTask
from models.importing.errors import ImportRefused
from models.importing.labels import labels_from_config
from models.importing.samples import TextSamples, check_texts, random_tensors
from models.importing.scores import fit_scores_to_task
from models.importing.signature import TEXT_INPUTS, check_text_inputs, name_anonymous_axes, read_signature
from models.importing.text import find_max_length, install_tokenizer


def load_checked(onnx_path: Path) -> onnx.ModelProto:
    """The parsed graph, or a refusal saying the file is not ONNX."""
    try:
        model = onnx.load(str(onnx_path))
        onnx.checker.check_model(model)
    except Exception as exc:  # protobuf and the checker raise several unrelated types for a bad file
        raise ImportRefused(f"{onnx_path} is not a valid ONNX model ({type(exc).__name__}: {exc})") from exc
    if not model.graph.output:
        raise ImportRefused(f"{onnx_path} is not a valid ONNX model: its graph has no outputs")
    return model


def convert_onnx(onnx_path: Path, folder: Path, request: ImportRequest, into: Path) -> Converted:
    """Stage `onnx_path` as the version's graph; `folder` is where a tokenizer and config may sit."""
    load_checked(onnx_path)
    staged = into / ONNX_FILE
    shutil.copyfile(onnx_path, staged)
    name_anonymous_axes(staged)
    inputs, outputs = read_signature(staged, "tensor")
    token_inputs = all(spec.name in TEXT_INPUTS for spec in inputs)
    labels = request.labels if request.labels is not None else labels_from_config(folder / "config.json")
    task = request.task or _guess_task(token_inputs, len(outputs[0].shape), labels)
    recipe = {"graph": f"{onnx_path.name} copied as it was given (dynamic axes named)", "onnx": onnx.__version__}
    if task == "tensor":
        samples = random_tensors({spec.name: spec.shape for spec in inputs}, {spec.name: spec.dtype for spec in inputs})
        return Converted(format="onnx", task=task, samples=samples, labels=labels if request.labels else (),
                         recipe=recipe)
    check_text_inputs(inputs)  # before any text is run through the graph
    tokenizer = install_tokenizer(folder, into)
    max_length = find_max_length(folder, tokenizer, request.max_length)
    samples_text = TextSamples(tokenizer, max_length, [spec.name for spec in inputs], check_texts(pairs=task == "rerank"))
    fitted = fit_scores_to_task(staged, task, samples_text)
    if fitted is not None:
        recipe["scores"] = fitted
    return Converted(format="onnx", task=task, samples=samples_text, labels=labels, tokenizer_file=tokenizer,
                     max_length=max_length, recipe=recipe)


def _guess_task(token_inputs: bool, first_output_rank: int, labels: tuple[str, ...]) -> ImportTask:
    if not token_inputs:
        return "tensor"
    if first_output_rank == 3:
        return "token-classification"
    return "classification" if labels else "embedding"
