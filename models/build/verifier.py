"""The cache-verifier versions: a cross-encoder deciding whether a cached answer fits a new text,
FP32 and INT8, each registered only when it holds its operating point; and the
cache-verifier-multilingual versions, the same on multilingual-e5-small (FP32), for the
languages MiniLM cannot read (models/build/verifier_backbone.py).

The weights are not learnt here: the maintainer's `scripts/train-models` fine-tuned them once and
shipped what changed as a low-rank adapter (models/build/trained.py says why). FP32: the packaged
MiniLM plus the adapter, exported; INT8: that graph statically quantised with the activation ranges
shipped beside the adapter. Each is calibrated here, on this machine, the way the worker runs it:
the held-out pairs (models/build/verifier_data.py) are scored by the graph, each pair both ways
round, the threshold is set to FLEET_SEMANTIC_MAX_FALSE_HITS and gated
(models/build/verifier_calibration.py). The threshold and the measured rates are the check's
figures in the manifest (`operating_threshold`, `heldout_false_hits`, `heldout_should_hit`), where
the worker reads them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from models.backends.onnx import open_session
from models.build.progress import Progress
from models.build.source import TOKENIZER_FILE
from models.build.trained import TRAINED_DIR, WEIGHTS_FILE, TrainedRecord, artifact_dir, read_record, read_weights
from models.build.verifier_backbone import VerifierBackbone
from models.build.verifier_calibration import OperatingPoint, calibrate_by_language, gate
from models.build.verifier_data import VerifierDataset
from models.build.verifier_pairs import PairExample
from models.build.version import ONNX_FILE, BuiltVersion, VersionPlan, build_version
from models.pair_feeds import MAX_PAIR_TOKENS, encode_pairs, pair_tokenizer
from models.registry import AccuracyCheck, HyperparameterValue, ModelManifest, ModelRegistry, sha256_of

VERIFIER_LABELS = ("different", "same")
RANGES_FILE = "int8-ranges.json"
_BATCH = 64


def registered_verifier(registry: ModelRegistry, name: str, precision: str, *, parent: str | None = None,
                        training_data: str | None = None, hyperparameters: dict[str, object] | None = None
                        ) -> ModelManifest | None:
    """Newest registered verifier matching what is given."""
    matches = [m for m in registry.versions(name) if m.precision == precision
               and (parent is None or m.parent == parent)
               and (training_data is None or m.training_data == training_data)
               and (hyperparameters is None or m.hyperparameters == hyperparameters)]
    return matches[-1] if matches else None


def shipped_hyperparameters(record: TrainedRecord, max_false_hits: float) -> dict[str, HyperparameterValue]:
    """What a built FP32 verifier's manifest records: the training's settings, the adapter's hash
    (another adapter is another version) and the target it is calibrated to."""
    return {**record.hyperparameters, "adapter_sha256": record.files[WEIGHTS_FILE][:16],
            "max_false_hits": max_false_hits}


def graph_scores(onnx_path: Path, tokenizer_file: Path, *pair_lists: Sequence[PairExample],
                 on_progress: Callable[[int, int], None] | None = None) -> list[npt.NDArray[np.float32]]:
    """P(same) per pair of each list, from a graph run on CPU the way the worker runs it (one thread)."""
    session = open_session(onnx_path, device="cpu", intra_op_threads=1, spinning=False)
    tokenizer = pair_tokenizer(tokenizer_file)
    total, done = sum(len(pairs) for pairs in pair_lists), 0

    def scores(pairs: Sequence[PairExample]) -> npt.NDArray[np.float32]:
        nonlocal done
        out = []
        for i in range(0, len(pairs), _BATCH):
            chunk = pairs[i:i + _BATCH]
            out.append(np.asarray(session.run(None, encode_pairs(tokenizer, [(p.a, p.b) for p in chunk]))[0])[:, 1])
            done += len(chunk)
            if on_progress is not None:
                on_progress(done, total)
        return np.concatenate(out).astype(np.float32) if out else np.zeros(0, dtype=np.float32)

    return [scores(pairs) for pairs in pair_lists]


def both_ways(pairs: Sequence[PairExample]) -> list[PairExample]:
    """Each pair as written and reversed: the worker reads (new, cached), and writers put either first."""
    return [*pairs, *(PairExample(p.b, p.a, p.kind, p.split) for p in pairs)]


def heldout_check(folder: Path, dataset: VerifierDataset, max_false_hits: float, progress: Progress,
                  figures: dict[str, float] | None = None) -> AccuracyCheck:
    """Calibrate the graph in `folder` on the held-out pairs (both ways round) and gate it; the probe's
    rates per kind go in the figures. The rate is pooled over all traps: the written sets name their
    own trap kinds, a handful of pairs each. It is the verifier's alone: in the worker the recall
    threshold and the guards refuse more traps before it, so the served rate can only be lower."""
    heldout = both_ways(dataset.heldout)
    progress.step(f"scoring {len(heldout)} held-out pairs (each both ways round) and {len(dataset.probe)} probe "
                  f"pairs with {folder / ONNX_FILE}")
    scores, probe = graph_scores(folder / ONNX_FILE, folder / TOKENIZER_FILE, heldout, dataset.probe,
                                 on_progress=progress.every(10.0, "scored"))
    point, per_language = calibrate_by_language(heldout, scores, max_false_hits)
    progress.step(f"operating point: threshold {point.threshold:.4f}, held-out traps served {point.false_hits:.2%} "
                  f"of {point.traps}, should-hit pairs served {point.should_hit:.2%} of {point.should_hits}")
    check = gate(point, max_false_hits)
    return check.model_copy(update={"figures": {**check.figures, **per_language,
                                                **_per_kind(probe, dataset.probe, point), **(figures or {})}})


def _per_kind(scores: npt.NDArray[np.float32], pairs: Sequence[PairExample], point: OperatingPoint) -> dict[str, float]:
    kinds = sorted({p.kind for p in pairs})
    return {f"template_served_{kind}": float(np.mean([s >= point.threshold for s, p in zip(scores, pairs)
                                                       if p.kind == kind]))
            for kind in kinds}


def _reproduced(folder: Path, record: TrainedRecord, precision: str, progress: Progress) -> dict[str, float]:
    """Whether this build made the very graph the maintainer's build made from the same adapter."""
    expected = record.graphs.get(precision)
    if expected is None:
        return {}
    same = sha256_of(folder / ONNX_FILE) == expected
    progress.step(f"{precision.upper()} graph {'is byte for byte' if same else 'DIFFERS from'} the maintainer's "
                  f"build of this adapter ({expected[:12]})" + ("" if same else ": other library versions than "
                                                                  "constraints.txt's? The gate below still decides"))
    return {"reproduced_maintainer_graph": float(same)}


def build_verifier_fp32(registry: ModelRegistry, backbone: VerifierBackbone, encoder: ModelManifest,
                        dataset: VerifierDataset, max_false_hits: float, progress: Progress,
                        trained_root: Path = TRAINED_DIR) -> BuiltVersion:
    from models.build import verifier_model

    name = backbone.verifier_name
    record, tensors = read_weights(name, trained_root)
    if record.training_data != dataset.version:
        progress.step(f"NOTE: the shipped adapter learnt from {record.training_data}, the repository's pairs are now "
                      f"{dataset.version}; scripts/train-models trains it on them")
    progress.step(f"{name}: {backbone.description} plus the shipped adapter "
                  f"({record.files[WEIGHTS_FILE][:12]}, trained on {record.trained_on})")
    model = verifier_model.apply_adapter(backbone.load_encoder(), tensors)
    model.encoder = backbone.for_export(model.encoder)

    def stage(folder: Path) -> None:
        verifier_model.export_onnx(model, folder / ONNX_FILE)
        (folder / TOKENIZER_FILE).write_text(backbone.tokenizer_json(), encoding="utf-8")

    def check(folder: Path) -> AccuracyCheck:
        return heldout_check(folder, dataset, max_false_hits, progress, _reproduced(folder, record, "fp32", progress))

    plan = VersionPlan(name=name, precision="fp32", parent=encoder.id, source=encoder.source,
                       max_length=MAX_PAIR_TOKENS, recipe=verifier_model.recipe(backbone.description, encoder.id, name),
                       training_data=record.training_data,
                       hyperparameters=shipped_hyperparameters(record, max_false_hits),
                       task="classification", labels=VERIFIER_LABELS)
    return build_version(registry, plan, stage, check, progress)


def build_verifier_int8(registry: ModelRegistry, fp32: ModelManifest, dataset: VerifierDataset,
                        max_false_hits: float, progress: Progress, trained_root: Path = TRAINED_DIR) -> BuiltVersion:
    from models.build import quantize

    record = read_record(fp32.name, trained_root)
    registry.verify(fp32)

    def stage(folder: Path) -> None:
        progress.step(f"quantising {fp32.id} to INT8 (static, per-channel, the shipped activation ranges)")
        quantize.quantize_static_int8(registry.path_of(fp32, fp32.onnx_file), folder / ONNX_FILE,
                                      artifact_dir(fp32.name, trained_root) / RANGES_FILE)
        shutil.copyfile(registry.path_of(fp32, fp32.tokenizer_file), folder / TOKENIZER_FILE)

    def check(folder: Path) -> AccuracyCheck:
        return heldout_check(folder, dataset, max_false_hits, progress, _reproduced(folder, record, "int8", progress))

    plan = VersionPlan(name=fp32.name, precision="int8", parent=fp32.id, source=fp32.source,
                       max_length=fp32.max_length, recipe={**fp32.recipe, **quantize.recipe(static=True)},
                       training_data=fp32.training_data or "",
                       hyperparameters={**fp32.hyperparameters, **quantize.static_hyperparameters()},
                       task="classification", labels=fp32.labels)
    return build_version(registry, plan, stage, check, progress)
