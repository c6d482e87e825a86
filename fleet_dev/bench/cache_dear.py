"""A model dearer than the semantic cache's encoder, made on the spot for `scripts/bench cache`.

`faq-intent-dear` is the built FP32 faq-intent graph with each row's tokens repeated `TILES`
times along the sequence before the encoder reads them (two `Tile` nodes in front of the
graph): the same classifier over a sequence `TILES` times longer, so a row costs many
times what the INT8 MiniLM encoder costs on the row itself. It stands for the models the
semantic tier is meant for (a larger encoder, a long-context classifier). Its answers differ
from faq-intent's (positions move) but are as deterministic, which is all the cache needs.
It lives in the bench registry only (<home>/bench/models), never in the served one.

`price_list` measures what a row costs each model the tier weighs against each other, in
this process, one thread, batches of 32 over the workload's texts.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from models.backends.options import RuntimeOptions
from models.loading import ModelLoader, RuntimeSpec
from models.registry import MANIFEST_FILE, ModelManifest, ModelRegistry, hash_files

DEAR_MODEL = "faq-intent-dear"
TILES = 8  # about 25x the INT8 encoder per row on the bench's texts (3: about 7x)
REPEATS_NAME = "dear_tile_repeats"
PRICE_BATCH = 32


def tiled_graph(model: onnx.ModelProto, tiles: int) -> onnx.ModelProto:
    """`model` with every [batch, sequence] input tiled `tiles` times along the sequence first."""
    graph = model.graph
    inputs = [value.name for value in graph.input]
    renamed = {name: f"{name}_tiled" for name in inputs}
    for node in graph.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]
    for output in graph.output:
        if output.name in renamed:
            raise ValueError(f"graph output {output.name} is an input: nothing to make dearer")
    graph.initializer.append(numpy_helper.from_array(np.array([1, tiles], dtype=np.int64), REPEATS_NAME))
    tiling = [onnx.helper.make_node("Tile", [name, REPEATS_NAME], [renamed[name]], name=f"dear_tile_{name}")
              for name in inputs]
    nodes = [*tiling, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def dear_model(built: ModelRegistry, source: ModelManifest, bench: ModelRegistry,
               tiles: int = TILES) -> ModelManifest:
    """The dear twin of `source` (a registered FP32 text classifier) in `bench`, made once per source
    version and tile count."""
    version_id = DEAR_MODEL + source.id.removeprefix(source.name)
    folder = bench.version_dir(DEAR_MODEL, version_id)
    if (folder / MANIFEST_FILE).is_file():
        made = bench.resolve(DEAR_MODEL, version_id)
        if made.recipe.get("dear_of") == source.id and made.recipe.get("tiles") == str(tiles):
            return made
    shutil.rmtree(folder, ignore_errors=True)  # none yet, or made from another build or tile count
    assert source.max_length is not None and source.tokenizer_file is not None
    folder.mkdir(parents=True)
    graph = tiled_graph(onnx.load(str(built.path_of(source, source.onnx_file))), tiles)
    onnx.save(graph, str(folder / source.onnx_file))
    (folder / source.tokenizer_file).write_bytes(built.path_of(source, source.tokenizer_file).read_bytes())
    recipe = {**source.recipe, "dear_of": source.id, "tiles": str(tiles), "made_by": "fleet_dev.bench.cache_dear",
              "graph": f"{source.id} graph with its token sequence tiled {tiles} times"}
    manifest = ModelManifest.model_validate({
        **source.model_dump(), "id": version_id, "name": DEAR_MODEL, "parent": source.id, "recipe": recipe,
        "max_length": source.max_length // tiles, "files": hash_files(folder, list(source.files))})
    return bench.register(manifest)


def ms_per_row(registry_dir: Path, manifest: ModelManifest, texts: Sequence[str], rounds: int = 3) -> float:
    """What a row costs `manifest`'s model: one thread, batches of PRICE_BATCH, best of `rounds` passes
    (the least disturbed by neighbours on a shared machine)."""
    options = RuntimeOptions(intra_op_threads=1, spinning=False, warmup=True)
    backend = ModelLoader(RuntimeSpec(registry_dir, manifest.name, manifest.id, manifest.precision,
                                      options=options)).load()
    batches = [list(texts[i:i + PRICE_BATCH]) for i in range(0, len(texts), PRICE_BATCH)]
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for batch in batches:
            backend.infer(batch)
        best = min(best, (time.perf_counter() - started) * 1000 / len(texts))
    return best


def price_list(models: dict[str, tuple[Path, ModelManifest]], texts: Sequence[str]) -> dict[str, Any]:
    """ms per row of each model (label -> (registry, manifest)), and each over the first one's."""
    costs = {label: ms_per_row(folder, manifest, texts) for label, (folder, manifest) in models.items()}
    first = next(iter(costs.values()))
    return {label: {"version": models[label][1].id, "ms_per_row": ms, "times_first": ms / first}
            for label, ms in costs.items()}


def describe_prices(prices: dict[str, Any], texts: int) -> str:
    cells = ", ".join(f"{label} {p['ms_per_row']:.2f} ms ({p['times_first']:.1f}x)" for label, p in prices.items())
    return f"cost of a row alone (1 thread, batches of {PRICE_BATCH}, best of 3 passes over {texts} texts): {cells}"
