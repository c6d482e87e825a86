"""The cache-verifier versions: a MiniLM cross-encoder deciding whether a cached answer fits a
new text, FP32 and INT8, each registered only when it holds its operating point.

FP32: fine-tune on the training pairs (models/build/verifier_data.py), export the graph, score
the held-out pairs with the exported graph (as the worker will run it), calibrate the threshold
to FLEET_SEMANTIC_MAX_FALSE_HITS and gate (models/build/verifier_calibration.py). INT8: the FP32
graph quantised like every INT8 version, calibrated again on its own scores and gated the same
way. The threshold and the measured rates are the check's figures in the manifest
(`operating_threshold`, `heldout_false_hits`, `heldout_should_hit`), where the worker reads them.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from models.backends.onnx import open_session
from models.build.progress import Progress
from models.build.source import TOKENIZER_FILE, PackagedModel
from models.build.verifier_calibration import OperatingPoint, calibrate, gate
from models.build.verifier_data import VerifierDataset
from models.build.verifier_pairs import PairExample
from models.build.version import ONNX_FILE, BuiltVersion, VersionPlan, build_version, quantized
from models.pair_feeds import MAX_PAIR_TOKENS, encode_pairs, pair_tokenizer
from models.registry import AccuracyCheck, ModelManifest, ModelRegistry

VERIFIER_MODEL_NAME = "cache-verifier"
VERIFIER_LABELS = ("different", "same")
_BATCH = 64


def registered_verifier(registry: ModelRegistry, precision: str, *, parent: str | None = None,
                        training_data: str | None = None, hyperparameters: dict[str, object] | None = None
                        ) -> ModelManifest | None:
    """Newest registered verifier matching what is given."""
    matches = [m for m in registry.versions(VERIFIER_MODEL_NAME) if m.precision == precision
               and (parent is None or m.parent == parent)
               and (training_data is None or m.training_data == training_data)
               and (hyperparameters is None or m.hyperparameters == hyperparameters)]
    return matches[-1] if matches else None


def graph_scores(onnx_path: Path, tokenizer_file: Path,
                 *pair_lists: Sequence[PairExample]) -> list[npt.NDArray[np.float32]]:
    """P(same) per pair of each list, from a graph run on CPU the way the worker runs it. Each list
    is batched on its own: an INT8 score moves by up to 0.01 with its batch-mates, so mixing lists
    would move the calibrated threshold."""
    session = open_session(onnx_path, device="cpu", intra_op_threads=0)
    tokenizer = pair_tokenizer(tokenizer_file)

    def scores(pairs: Sequence[PairExample]) -> npt.NDArray[np.float32]:
        out = [np.asarray(session.run(None, encode_pairs(tokenizer, [(p.a, p.b) for p in pairs[i:i + _BATCH]]))[0])[:, 1]
               for i in range(0, len(pairs), _BATCH)]
        return np.concatenate(out).astype(np.float32)

    return [scores(pairs) for pairs in pair_lists]


def heldout_check(folder: Path, dataset: VerifierDataset, max_false_hits: float, progress: Progress,
                  figures: dict[str, float] | None = None) -> AccuracyCheck:
    """Calibrate the graph in `folder` on the held-out pairs and gate it; the probe's rates per kind go
    in the figures. The rate is pooled over all traps: the written sets name their own trap kinds, a
    handful of pairs each. It is the verifier's alone: in the worker the recall threshold and the
    guards refuse more traps before it, so the served rate can only be lower."""
    scores, probe = graph_scores(folder / ONNX_FILE, folder / TOKENIZER_FILE, dataset.heldout, dataset.probe)
    should = np.array([p.should_hit for p in dataset.heldout])
    point = calibrate(scores[~should], scores[should], max_false_hits)
    progress.step(f"operating point: threshold {point.threshold:.4f}, held-out traps served {point.false_hits:.2%} "
                  f"of {point.traps}, should-hit pairs served {point.should_hit:.2%} of {point.should_hits}")
    check = gate(point, max_false_hits)
    return check.model_copy(update={"figures": {**check.figures, **_per_kind(probe, dataset.probe, point),
                                                **(figures or {})}})


def _per_kind(scores: npt.NDArray[np.float32], pairs: Sequence[PairExample], point: OperatingPoint) -> dict[str, float]:
    kinds = sorted({p.kind for p in pairs})
    return {f"template_served_{kind}": float(np.mean([s >= point.threshold for s, p in zip(scores, pairs)
                                                       if p.kind == kind]))
            for kind in kinds}


def build_verifier_fp32(registry: ModelRegistry, packaged: PackagedModel, encoder: ModelManifest,
                        dataset: VerifierDataset, max_false_hits: float, progress: Progress) -> BuiltVersion:
    from models.build import verifier_model

    hyper = verifier_model.VerifierHyperparameters()
    tokenizer = pair_tokenizer(packaged.tokenizer_file)
    model = verifier_model.load_classifier(packaged.model_dir, hyper.seed)
    progress.step(f"{VERIFIER_MODEL_NAME}: fine-tuning MiniLM as a cross-encoder on {len(dataset.train)} pairs of "
                  f"{dataset.version} ({hyper.epochs} epochs{', each pair both ways round' if hyper.both_orders else ''}, "
                  "frozen word embeddings)")
    loss = verifier_model.train(model, tokenizer, [(p.a, p.b) for p in dataset.train],
                                [int(p.should_hit) for p in dataset.train], hyper)
    progress.step(f"trained: last epoch's mean loss {loss:.4f}")

    def stage(folder: Path) -> None:
        verifier_model.export_onnx(model, folder / ONNX_FILE)
        shutil.copyfile(packaged.tokenizer_file, folder / TOKENIZER_FILE)

    def check(folder: Path) -> AccuracyCheck:
        progress.step(f"scoring {len(dataset.heldout)} held-out pairs with the exported graph")
        return heldout_check(folder, dataset, max_false_hits, progress, {"train_loss": loss})

    plan = VersionPlan(name=VERIFIER_MODEL_NAME, precision="fp32", parent=encoder.id, source=encoder.source,
                       max_length=MAX_PAIR_TOKENS, recipe=verifier_model.recipe(encoder.id),
                       training_data=dataset.version,
                       hyperparameters={**hyper.as_manifest(), "max_false_hits": max_false_hits},
                       task="classification", labels=VERIFIER_LABELS)
    return build_version(registry, plan, stage, check, progress)


def build_verifier_int8(registry: ModelRegistry, fp32: ModelManifest, dataset: VerifierDataset,
                        max_false_hits: float, progress: Progress) -> BuiltVersion:
    from models.build import quantize

    stage = quantized(registry, fp32, progress)

    def check(folder: Path) -> AccuracyCheck:
        progress.step(f"scoring {len(dataset.heldout)} held-out pairs with the INT8 graph and calibrating again")
        return heldout_check(folder, dataset, max_false_hits, progress)

    plan = VersionPlan(name=VERIFIER_MODEL_NAME, precision="int8", parent=fp32.id, source=fp32.source,
                       max_length=fp32.max_length, recipe={**fp32.recipe, **quantize.recipe()},
                       training_data=fp32.training_data or "",
                       hyperparameters={**fp32.hyperparameters, **quantize.hyperparameters()},
                       task="classification", labels=fp32.labels)
    return build_version(registry, plan, stage, check, progress)
