"""An ONNX graph a team already exported: staged, its task read from its signature.

With token inputs (input_ids, ...) and a tokenizer beside it (or named with --tokenizer), it is a
text model: a rank-3 first output is token classification, labels make it a classifier, else an
embedding model (a reranker must be asked for with --task rerank). Anything else is a tensor model.
A text graph's scores are fitted to its task (`models.importing.scores`).

Files exported elsewhere rarely come as the worker serves them: their inputs have other names,
they have several outputs, or give a vector per token. `--input`, `--output`, `--pooling` and
`--normalize` say what the file leaves open (`models.importing.choices`); the staged graph is then
edited into the standard one (`models.importing.graph_edits`), and checked against ONNX Runtime
running the file as it was given, with the pooling done in numpy.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from models.importing.choices import choose_output, describe_graph, plan_edits
from models.importing.converted import ONNX_FILE, Converted, ImportRequest, ImportTask, Reference
from models.importing.errors import ImportRefused
from models.importing.graph_edits import GraphEdits, edit_graph, reference_on_original
from models.importing.labels import labels_from_config
from models.importing.samples import TextSamples, check_texts, random_tensors
from models.importing.scores import fit_scores_to_task
from models.importing.signature import TEXT_INPUTS, check_text_inputs, name_anonymous_axes, read_signature
from models.importing.text import find_max_length, has_tokenizer, install_tokenizer
from models.registry import OutputSpec, TensorSpec

# The edited graph against ONNX Runtime on the original file: the same operators on the same
# floats, so FP32 agrees far closer than the build's 1e-4 (values up to 1; scaled above).
EDITED_MAX_ABS_DIFF = 1e-5
REFERENCE_LABEL = "original-onnx"


@dataclass(frozen=True)
class _Staged:
    original: Path  # the file as it was given
    graph: Path  # its copy in the staged version folder
    folder: Path  # where a tokenizer and config may sit beside it
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[OutputSpec, ...]


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
    graph = into / ONNX_FILE
    shutil.copyfile(onnx_path, graph)
    name_anonymous_axes(graph)
    inputs, outputs = read_signature(graph, "tensor")
    staged = _Staged(onnx_path, graph, folder, inputs, outputs)
    labels = request.labels if request.labels is not None else labels_from_config(folder / "config.json")
    task = request.task or _guess_task(request, staged, labels)
    if task == "tensor":
        return _tensor_model(staged, request, labels)
    return _text_model(staged, request, task, labels, into)


def _guess_task(request: ImportRequest, staged: _Staged, labels: tuple[str, ...]) -> ImportTask:
    if request.pooling is not None or request.normalize:
        return "embedding"
    served = {graph_name: tokenizer_name for tokenizer_name, graph_name in request.inputs}
    token_inputs = all(served.get(spec.name, spec.name) in TEXT_INPUTS for spec in staged.inputs)
    # A tokenizer at hand makes it a text model whose inputs are to be named (refused, listing them).
    text_meant = bool(request.inputs) or request.tokenizer is not None or has_tokenizer(staged.folder)
    if not token_inputs and not text_meant:
        return "tensor"
    first = next((spec for spec in staged.outputs if spec.name == request.output), staged.outputs[0])
    if len(first.shape) != 3:
        return "classification" if labels else "embedding"
    if not labels:
        output_hint = "" if request.output is not None else " (and --output NAME for another output)"
        raise ImportRefused(f"output {first.name!r} has a vector per token: for a sentence embedding pool it with "
                            f"--pooling mean|cls{output_hint}; for a token classifier give its labels (--labels, or "
                            f"id2label in config.json). {describe_graph(staged.inputs, staged.outputs)}")
    return "token-classification"


def _tensor_model(staged: _Staged, request: ImportRequest, labels: tuple[str, ...]) -> Converted:
    text_only = [flag for flag in request.onnx_file_flags() if flag != "--output"]
    if text_only:
        raise ImportRefused(f"{', '.join(text_only)}: for text models (token inputs and a tokenizer), and this graph "
                            f"imports as a tensor model. {describe_graph(staged.inputs, staged.outputs)}")
    chosen = choose_output("tensor", staged.outputs, request.output, None,
                           describe_graph(staged.inputs, staged.outputs))
    edits = GraphEdits(output=None if chosen is None else chosen.name)
    done = edit_graph(staged.graph, edits)
    inputs, _ = read_signature(staged.graph, "tensor")
    samples = random_tensors({spec.name: spec.shape for spec in inputs}, {spec.name: spec.dtype for spec in inputs})
    return Converted(format="onnx", task="tensor", samples=samples, labels=labels if request.labels else (),
                     recipe=_recipe(staged, edits, done), reference=_reference(staged, edits, done),
                     reference_label=REFERENCE_LABEL, reference_max_abs_diff=EDITED_MAX_ABS_DIFF)


def _text_model(staged: _Staged, request: ImportRequest, task: ImportTask, labels: tuple[str, ...],
                into: Path) -> Converted:
    edits = plan_edits(request, task, staged.inputs, staged.outputs)
    done = edit_graph(staged.graph, edits)
    inputs, _ = read_signature(staged.graph, task)
    check_text_inputs(inputs)  # before any text is run through the graph
    tokenizer_source = request.tokenizer or staged.folder
    tokenizer = install_tokenizer(tokenizer_source, into)
    config_folder = tokenizer_source if tokenizer_source.is_dir() else tokenizer_source.parent
    max_length = find_max_length(config_folder, tokenizer, request.max_length,
                                 then=staged.folder if config_folder != staged.folder else None)
    samples = TextSamples(tokenizer, max_length, [spec.name for spec in inputs], check_texts(pairs=task == "rerank"))
    recipe = {**_recipe(staged, edits, done), "tokenizer": str(tokenizer_source)}
    reference = _reference(staged, edits, done)
    fitted = fit_scores_to_task(staged.graph, task, samples)
    if fitted is not None:
        recipe["scores"] = fitted.why
        reference = None if reference is None else fitted.after(reference)
    return Converted(format="onnx", task=task, samples=samples, labels=labels, tokenizer_file=tokenizer,
                     max_length=max_length, recipe=recipe, hyperparameters=_head(edits), reference=reference,
                     reference_label=REFERENCE_LABEL, reference_max_abs_diff=EDITED_MAX_ABS_DIFF)


def _reference(staged: _Staged, edits: GraphEdits, done: Sequence[str]) -> Reference | None:
    """An edited graph is checked against the file as it was given; one staged as it was has no reference."""
    if not done:
        return None
    output = edits.output or staged.outputs[0].name
    served_as = onnx.load(str(staged.graph), load_external_data=False).graph.output[0].name
    return reference_on_original(staged.original, edits, output, served_as)


def _recipe(staged: _Staged, edits: GraphEdits, done: Sequence[str]) -> dict[str, str]:
    recipe = {"graph": f"{staged.original.name} copied as it was given (dynamic axes named)", "onnx": onnx.__version__}
    if done:
        recipe["graph"] = f"{staged.original.name} (dynamic axes named), edited: {'; '.join(done)}"
        recipe["reference"] = "ONNX Runtime on the original file" + (
            ", pooled and normalised in numpy" if edits.pooling is not None or edits.normalize else "")
    if edits.output is not None:
        recipe["output"] = f"{edits.output} (of {', '.join(spec.name for spec in staged.outputs)})"
    if edits.renames:
        recipe["inputs"] = ", ".join(f"{new}={old}" for old, new in edits.renames.items())
    if edits.pooling is not None:
        recipe["pooling"] = "mean over attention_mask" if edits.pooling == "mean" else "cls: the first token"
    if edits.normalize:
        recipe["normalize"] = "L2: x / max(||x||, 1e-12)"
    return recipe


def _head(edits: GraphEdits) -> dict[str, float | int | str]:
    """What was put on top of the file's output, as the sentence-transformers import records it."""
    head: dict[str, float | int | str] = {}
    if edits.pooling is not None:
        head["pooling"] = edits.pooling
    if edits.normalize:
        head["normalize"] = "l2"
    return head
