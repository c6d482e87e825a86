"""Which inputs and which output of an ONNX file a text task takes: the operator's --input, --output,
--pooling and --normalize held against the graph's signature, and the edits that follow from them.

Where the file leaves a choice open (outputs that could each be the embedding, token vectors with
no pooling named, inputs a tokenizer does not make) nothing is guessed: the refusal lists the
graph's inputs and outputs with their types and shapes, and names the flag that settles it.
"""

from __future__ import annotations

from collections.abc import Sequence

from models.importing.converted import ImportRequest, ImportTask, Pooling
from models.importing.errors import ImportRefused
from models.importing.graph_edits import GraphEdits
from models.manifest import TOKENIZER_INPUTS
from models.registry import OutputSpec, TensorSpec

# The element type the appended pooling and normalisation nodes compute in.
POOLED_DTYPE = "float32"


def describe_graph(inputs: Sequence[TensorSpec], outputs: Sequence[OutputSpec]) -> str:
    """'The graph takes ids int64 [batch, sequence] ... and gives ...': for a refusal to show."""
    def spec(value: TensorSpec) -> str:
        return f"{value.name} {value.dtype} [{', '.join(str(axis) for axis in value.shape)}]"

    return (f"The graph takes {', '.join(map(spec, inputs)) or 'no inputs'} "
            f"and gives {', '.join(map(spec, outputs))}")


def plan_edits(request: ImportRequest, task: ImportTask, inputs: Sequence[TensorSpec],
               outputs: Sequence[OutputSpec]) -> GraphEdits:
    """The edits that make the graph what the text task serves; refuses what the request leaves open."""
    graph = describe_graph(inputs, outputs)
    renames = input_renames(request.inputs, inputs, graph)
    if (request.pooling is not None or request.normalize) and task != "embedding":
        raise ImportRefused(f"--pooling and --normalize make one vector a text: they are for --task embedding, "
                            f"not {task}")
    chosen = choose_output(task, outputs, request.output, request.pooling, graph)
    if chosen is not None and task == "embedding":
        check_embedding_output(chosen, request, multiple=len(outputs) > 1, graph=graph)
    return GraphEdits(renames=renames, output=None if chosen is None else chosen.name, pooling=request.pooling,
                      normalize=request.normalize)


def input_renames(asked: Sequence[tuple[str, str]], inputs: Sequence[TensorSpec], graph: str) -> dict[str, str]:
    """Graph input -> the tokenizer's name for it, from --input TOKENIZER_NAME=GRAPH_NAME pairs."""
    names = [spec.name for spec in inputs]
    renames: dict[str, str] = {}
    mapped: dict[str, str] = {}  # tokenizer name -> graph input, as given
    for tokenizer_name, graph_name in asked:
        flag = f"--input {tokenizer_name}={graph_name}"
        if tokenizer_name not in TOKENIZER_INPUTS:
            raise ImportRefused(f"{flag}: a tokenizer makes {', '.join(TOKENIZER_INPUTS)}, not {tokenizer_name!r}")
        if graph_name not in names:
            raise ImportRefused(f"{flag}: the graph has no input {graph_name!r}. {graph}")
        if tokenizer_name in mapped or graph_name in mapped.values():
            raise ImportRefused(f"{flag}: each tokenizer name and each graph input is named once in --input")
        mapped[tokenizer_name] = graph_name
        if tokenizer_name != graph_name:
            renames[graph_name] = tokenizer_name
    served = [renames.get(name, name) for name in names]
    unknown = [name for name, as_served in zip(names, served) if as_served not in TOKENIZER_INPUTS]
    if unknown:
        raise ImportRefused(f"inputs {unknown} are not what a tokenizer makes ({', '.join(TOKENIZER_INPUTS)}): say "
                            f"which is which with --input TOKENIZER_NAME=GRAPH_NAME (e.g. --input "
                            f"input_ids={unknown[0]}), or import the graph as a tensor model (--task tensor). {graph}")
    twice = sorted({name for name in served if served.count(name) > 1})
    if twice:
        raise ImportRefused(f"--input: two graph inputs would both be {twice[0]!r}. {graph}")
    return renames


def _per_token(spec: OutputSpec) -> bool:
    return spec.dtype.startswith("float") and len(spec.shape) == 3 and isinstance(spec.shape[2], int)


def _per_text(spec: OutputSpec) -> bool:
    return spec.dtype.startswith("float") and len(spec.shape) == 2 and isinstance(spec.shape[1], int)


def choose_output(task: ImportTask, outputs: Sequence[OutputSpec], asked: str | None, pooling: Pooling | None,
                  graph: str) -> OutputSpec | None:
    """The output to serve: the one asked for, else for an embedding the one output that can be it;
    None: the graph's outputs as they are (the task serves the first)."""
    if asked is not None:
        for spec in outputs:
            if spec.name == asked:
                return spec
        raise ImportRefused(f"--output {asked}: the graph has no output {asked!r}. {graph}")
    if task != "embedding":
        return None
    if len(outputs) == 1:
        return outputs[0]
    # With --pooling only token vectors can be meant; without, a pooled [batch, width] output can be,
    # and so can token vectors (which then need --pooling): nothing tells a pooler_output from a mean.
    candidates = [spec for spec in outputs if _per_token(spec) or (pooling is None and _per_text(spec))]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise ImportRefused("no output of the graph can be an embedding ([batch, width] floats, or "
                            "[batch, sequence, width] with --pooling): name the one to serve with --output NAME. "
                            f"{graph}")
    names = ", ".join(repr(spec.name) for spec in candidates)
    pool_hint = " (and --pooling mean|cls if it has a vector per token)" if any(map(_per_token, candidates)) else ""
    raise ImportRefused(f"several outputs could be the embedding ({names}): name the one to serve with --output "
                        f"NAME{pool_hint}. {graph}")


def check_embedding_output(chosen: OutputSpec, request: ImportRequest, *, multiple: bool, graph: str) -> None:
    """Refuse an output that pooling (asked for or not) would not make one float vector a text."""
    shape = f"{chosen.name!r} is {chosen.dtype} [{', '.join(str(axis) for axis in chosen.shape)}]"
    other = ", or name another output with --output NAME" if multiple else ""
    if request.pooling is not None and not _per_token(chosen):
        raise ImportRefused(f"--pooling {request.pooling} pools a vector per token, [batch, sequence, width]; "
                            f"{shape}{': drop --pooling' if _per_text(chosen) else ''}. {graph}")
    if request.pooling is None and _per_token(chosen):
        raise ImportRefused(f"{shape}: a vector per token, not one per text. Pool it with --pooling mean (over "
                            f"the attention mask) or --pooling cls (the first token){other}. {graph}")
    if not (_per_token(chosen) or _per_text(chosen)):
        raise ImportRefused(f"an embedding model's output is [batch, width] floats with a fixed width; {shape}"
                            f"{': name the one to serve with --output NAME' if multiple else ''}. {graph}")
    if (request.pooling is not None or request.normalize) and chosen.dtype != POOLED_DTYPE:
        raise ImportRefused(f"--pooling and --normalize append {POOLED_DTYPE} nodes; {shape}. {graph}")
