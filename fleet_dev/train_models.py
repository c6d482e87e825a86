"""`scripts/train-models`: the maintainer's command that trains what
`scripts/build-models` ships instead of learning it again on every machine.

    scripts/train-models                    train the faq-intent heads and the cache verifiers
    scripts/train-models --only faq-intent  one of them; the others stay as shipped (and are not rewritten)
    scripts/train-models --only cache-verifier-multilingual
                                            the verifier on multilingual-e5-small, trained only when named

It trains in a scratch folder, then builds every model from the candidates exactly as
`scripts/build-models` will (static INT8 included) into a scratch registry, and measures how far a
score can move on another machine: the verifier's scores with other batch-mates, thread counts and
graph optimisation levels, the encoder's cosines alone and in batches. Only when every pinned pair
set (fleet_dev/verifier_gates.py) meets its target with a margin of that noise, and the
faq-intent head its held-out accuracy, are the candidates written to models/build/data/trained/,
each with a record of its data version, hyperparameters, libraries, machine, figures and the
hashes of the graphs this build made from it. Commit them with their record. Exit status 1, with
the table, when a target is missed: nothing is written then.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from fleet_dev.arguments import script_parser
from fleet.commands.pair_eval import Pair, embed_all
from fleet_dev.verifier_gates import MULTILINGUAL_PINNED_SETS, PINNED_SETS, Noise, PinnedSet, Standing, standing
from fleet.exits import Exit
from fleet.tables import format_table
from models.build import verifier_backbone
from models.build.progress import Progress
from models.build.trained import (
    RECORD_FILE,
    TRAINED_DIR,
    Tensors,
    artifact_dir,
    library_versions,
    read_record,
    write_artifact,
)
from models.registry import ModelManifest, ModelRegistry
from workers.cache.verifier import CacheVerifier

FAQ = "faq-intent"
FAQ_MULTILINGUAL = "faq-intent-multilingual"
VERIFIER = "cache-verifier"
VERIFIER_MULTILINGUAL = "cache-verifier-multilingual"
TRAINED = (FAQ, FAQ_MULTILINGUAL, VERIFIER, VERIFIER_MULTILINGUAL)
LIBRARIES = ("torch", "transformers", "onnx", "onnxruntime", "numpy", "tokenizers")
# Floors under the measured noise, for what one machine cannot show: another instruction set. The
# verifier's INT8 sums are exact integers everywhere (7-bit weights, see models/build/quantize.py);
# its float kernels (LayerNorm, GELU, softmax, the scales) round differently, ~1e-5 in logits as the
# FP32 graph moves, and a requantised activation can flip by one step: 0.05 logits is thousands of
# times the former and covers many of the latter.
MIN_LOGIT_NOISE = 0.05
MIN_COSINE_NOISE = 0.005
CALIBRATION_PAIRS = 512  # training pairs whose activations set the static INT8 ranges
_CALIBRATION_BATCH = 32


def main(argv: list[str]) -> int:
    parser = script_parser("train-models", __doc__)
    parser.add_argument("--only", choices=TRAINED, default=None,
                        help="train one; the others stay as shipped")
    parser.add_argument("--into", type=Path, default=TRAINED_DIR,
                        help="where to write the trained artifacts (default: models/build/data/trained)")
    args = parser.parse_args(argv)
    progress = Progress()
    with tempfile.TemporaryDirectory(prefix="fleet-train-") as scratch:
        work = Path(scratch)
        candidates = work / "trained"
        shutil.copytree(args.into, candidates) if args.into.is_dir() else candidates.mkdir()
        registry = ModelRegistry(work / "registry")
        for faq in (FAQ, FAQ_MULTILINGUAL):
            if args.only in (None, faq):
                with progress.stage(f"{faq} head (train)"):
                    _train_faq_head(faq, registry, candidates, progress)
        if args.only in (None, VERIFIER):
            with progress.stage(f"{VERIFIER} (fine-tune, adapter, INT8 ranges)"):
                _train_verifier(VERIFIER, registry, candidates, work, progress)
        if args.only == VERIFIER_MULTILINGUAL:  # only when named: eighteen minutes on two cores
            with progress.stage(f"{VERIFIER_MULTILINGUAL} (fine-tune, adapter)"):
                _train_verifier(VERIFIER_MULTILINGUAL, registry, candidates, work, progress)
        with progress.stage("build every model from the candidates"):
            versions = _build(registry, candidates, progress)
        with progress.stage("gates with margins"):
            passed = _gates(registry, versions, candidates, progress)
        if not passed:
            progress.step("FAILED: a target is missed (table above); nothing written")
            return Exit.FAILED
        trained = [args.only] if args.only else [FAQ, FAQ_MULTILINGUAL, VERIFIER]
        for name in trained:
            target = artifact_dir(name, args.into)
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(artifact_dir(name, candidates), target)
        progress.step(f"written to {args.into}: commit {'/, '.join(trained)}/ with their record.json")
    print(format_table(("stage", "seconds"), [(name, f"{seconds:.1f}") for name, seconds in progress.stages],
                       right=("seconds",)))
    return Exit.OK


def _train_faq_head(name: str, registry: ModelRegistry, candidates: Path, progress: Progress) -> None:
    """faq-intent on minilm-embed from the English examples; faq-intent-multilingual on e5-embed from
    the English and the Chinese ones."""
    from models.build.build import build_fp32
    from models.build.e5 import build_e5_fp32, locate_packaged_e5
    from models.build.faq import trained_head
    from models.build.faq_data import FAQ_DATA_FILE, FAQ_ZH_DATA_FILE, load_faq_datasets
    from models.build.head import HeadHyperparameters
    from models.build.source import locate_packaged_model

    if name == FAQ:
        encoder = build_fp32(registry, locate_packaged_model(), progress).manifest
        dataset = load_faq_datasets((FAQ_DATA_FILE,))
    else:
        encoder = build_e5_fp32(registry, locate_packaged_e5(), progress).manifest
        dataset = load_faq_datasets((FAQ_DATA_FILE, FAQ_ZH_DATA_FILE))
    hyper = HeadHyperparameters()
    head, accuracy = trained_head(registry, encoder, dataset, hyper, progress)
    write_artifact(name, {"weight": head.weight, "bias": head.bias}, {}, {
        "training_data": dataset.version, "hyperparameters": hyper.as_manifest(),
        "base": f"{encoder.source.package} {encoder.source.package_version}: the {encoder.name} FP32 graph "
                f"({encoder.files[encoder.onnx_file][:12]})",
        "libraries": library_versions(*LIBRARIES), "figures": {"train_accuracy": accuracy},
        "graphs": {}, }, root=candidates)


def _train_verifier(name: str, registry: ModelRegistry, candidates: Path, work: Path, progress: Progress) -> None:
    """cache-verifier: MiniLM fine-tuned on the English pairs, with the static INT8 ranges of its graph;
    cache-verifier-multilingual: multilingual-e5-small on the English and the Chinese pairs (FP32 only)."""
    from models.build import quantize, verifier_model
    from models.build.multilingual_pairs import load_multilingual_dataset
    from models.build.source import locate_packaged_model
    from models.build.verifier import RANGES_FILE
    from models.build.verifier_data import load_verifier_dataset
    from models.pair_feeds import encode_pairs

    hyper = verifier_model.VerifierHyperparameters()
    if name == VERIFIER_MULTILINGUAL:
        # Twelve layers, not six: at MiniLM's 2e-4, two runs with unrelated pairs collapsed (held-out
        # should-hit 5% and 2%; 53% at 5e-5).
        hyper = verifier_model.VerifierHyperparameters(lr=5e-5)
    if name == VERIFIER:
        packaged = locate_packaged_model()
        backbone, dataset = verifier_backbone.minilm_backbone(packaged), load_verifier_dataset()
        base = f"{packaged.source.package} {packaged.package_version} ({packaged.source.base_model})"
    else:
        backbone, base = _e5_backbone(registry, progress)
        dataset = load_multilingual_dataset()
    tokenizer = backbone.pair_tokenizer()
    model = verifier_model.load_classifier(backbone.load_encoder, hyper.seed)
    progress.step(f"{name}: fine-tuning {backbone.description} as a cross-encoder on {len(dataset.train)} pairs of "
                  f"{dataset.version} ({hyper.epochs} epochs, each pair both ways round, frozen word embeddings)")
    loss = verifier_model.train(model, tokenizer, [(p.a, p.b) for p in dataset.train],
                                [int(p.should_hit) for p in dataset.train], hyper,
                                on_step=progress.every(what="batches"))
    progress.step(f"trained: last epoch's mean loss {loss:.4f}; cutting it to a rank-{hyper.adapter_rank} adapter")
    tensors: Tensors = verifier_model.adapter_from(model, backbone.load_encoder(), hyper.adapter_rank)
    record = {"training_data": dataset.version, "hyperparameters": hyper.as_manifest(), "base": base,
              "libraries": library_versions(*LIBRARIES), "figures": {"train_loss": loss}, "graphs": {}}
    if name == VERIFIER_MULTILINGUAL:
        write_artifact(name, tensors, {}, record, root=candidates)
        return
    # The static INT8 ranges are measured on the graph the build will make: the adapter applied, exported.
    fp32_onnx = work / "verifier-fp32.onnx"
    verifier_model.export_onnx(verifier_model.apply_adapter(backbone.load_encoder(), tensors), fp32_onnx)
    pairs = [(p.a, p.b) for p in dataset.train]
    random.Random(hyper.seed).shuffle(pairs)
    feeds = [encode_pairs(tokenizer, pairs[i:i + _CALIBRATION_BATCH])
             for i in range(0, CALIBRATION_PAIRS, _CALIBRATION_BATCH)]
    progress.step(f"measuring the INT8 activation ranges on {CALIBRATION_PAIRS} training pairs")
    quantize.quantize_static_int8(fp32_onnx, work / "verifier-int8.onnx", work / RANGES_FILE, feeds)
    write_artifact(name, tensors, {RANGES_FILE: work / RANGES_FILE}, record, root=candidates)


def _e5_backbone(registry: ModelRegistry, progress: Progress) -> tuple[verifier_backbone.VerifierBackbone, str]:
    """The multilingual verifier's backbone, its tokenizer from an e5-embed FP32 version built here."""
    from models.build.e5 import build_e5_fp32, locate_packaged_e5, registered_e5

    packaged = locate_packaged_e5()
    e5 = registered_e5(registry, "fp32", packaged.source) or build_e5_fp32(registry, packaged, progress).manifest
    base = f"{packaged.source.package} {packaged.package_version} ({packaged.source.base_model})"
    return verifier_backbone.e5_backbone(packaged, registry.path_of(e5, e5.tokenizer_file or "")), base


def _build(registry: ModelRegistry, candidates: Path, progress: Progress) -> dict[str, ModelManifest]:
    from models.build.__main__ import build_all
    from models.build.source import locate_packaged_model

    built = build_all(registry, locate_packaged_model(), progress, trained=candidates)
    return {f"{version.manifest.name}/{version.manifest.precision}": version.manifest for version in built}


def _gates(registry: ModelRegistry, versions: dict[str, ModelManifest], candidates: Path, progress: Progress) -> bool:
    faq_ok = all(versions[f"{faq}/{precision}"].check.passed
                 for faq in (FAQ, FAQ_MULTILINGUAL) for precision in ("fp32", "int8"))
    verifiers = [_verifier_gates(registry, VERIFIER, "minilm-embed", "int8", PINNED_SETS, progress)]
    if (artifact_dir(VERIFIER_MULTILINGUAL, candidates) / RECORD_FILE).is_file():
        verifiers.append(_verifier_gates(registry, VERIFIER_MULTILINGUAL, "e5-embed", "fp32", MULTILINGUAL_PINNED_SETS,
                                         progress))
    passed = faq_ok and all(gates is not None and all(s.meets_target_with_margin for s in gates.standings)
                            for gates in verifiers)
    if passed:
        _complete_records(candidates, versions, [gates for gates in verifiers if gates is not None])
    return passed


@dataclass(frozen=True)
class VerifierGates:
    verifier: CacheVerifier
    noise: Noise
    standings: list[Standing]


def _verifier_gates(registry: ModelRegistry, name: str, encoder_model: str, precision: str,
                    pinned_sets: Sequence[PinnedSet], progress: Progress) -> VerifierGates | None:
    """Where each pinned set stands with the verifier `name` and its encoder, with margins of the noise."""
    verifier = CacheVerifier.newest(registry, precision, name)
    if verifier is None or verifier.manifest.precision != precision:
        progress.step(f"the {precision.upper()} {name} missed its held-out gate in this build")
        return None
    pinned = [(pinned, pinned.pairs()) for pinned in pinned_sets]
    texts = [text for _, pairs in pinned for pair in pairs for text in (pair.a, pair.b)]
    progress.step(f"{name}: embedding {len(set(texts))} texts of the pinned sets with {encoder_model}; measuring "
                  "score noise")
    vectors = embed_all(texts, registry.root, encoder_model).vectors
    noise = Noise(logit=max(MIN_LOGIT_NOISE, _logit_noise(registry, verifier, pinned, progress)),
                  cosine=max(MIN_COSINE_NOISE, _cosine_noise(registry, encoder_model, texts, vectors)))
    standings = [standing(pinned_set, pairs, vectors, verifier.score([(p.b, p.a) for p in pairs]).scores,
                          verifier.threshold, noise) for pinned_set, pairs in pinned]
    print(f"{name} ({verifier.manifest.id}, threshold {verifier.threshold:.4f}):")
    print(gate_table(standings, noise))
    return VerifierGates(verifier, noise, standings)


def _logit_noise(registry: ModelRegistry, verifier: CacheVerifier, pinned: list[tuple[PinnedSet, list[Pair]]],
                 progress: Progress) -> float:
    """The largest move of a verifier logit over the pinned pairs between the worker's way of scoring
    (batches, one thread) and others: alone, shuffled batch-mates, two threads. (Another optimisation
    level is no proxy for another CPU: "basic" leaves QDQ unfused and computes another way.)"""
    from models.backends.onnx import open_session
    from models.pair_feeds import encode_pairs, pair_tokenizer

    manifest = verifier.manifest
    pairs = [(p.b, p.a) for _, set_pairs in pinned for p in set_pairs]
    tokenizer = pair_tokenizer(registry.path_of(manifest, manifest.tokenizer_file), manifest.max_length)
    onnx = registry.path_of(manifest, manifest.onnx_file)

    def scores(order: list[int], batch: int, threads: int = 1) -> npt.NDArray[np.float64]:
        session = open_session(onnx, device="cpu", intra_op_threads=threads, spinning=False)
        out = np.zeros(len(pairs))
        for start in range(0, len(order), batch):
            rows = order[start:start + batch]
            out[rows] = np.asarray(session.run(None, encode_pairs(tokenizer, [pairs[i] for i in rows]))[0])[:, 1]
        clipped = np.clip(out, 1e-7, 1 - 1e-7)
        return np.log(clipped / (1 - clipped))

    order = list(range(len(pairs)))
    shuffled = order[:]
    random.Random(0).shuffle(shuffled)
    sample = order[::7]  # a pair alone, for a seventh of them: a run per pair is slow
    reference = scores(order, 64)
    alone = scores(sample, 1)
    moves = [np.abs(scores(shuffled, 64) - reference).max(), np.abs(scores(order, 64, threads=2) - reference).max(),
             np.abs(alone[sample] - reference[sample]).max()]
    progress.step("verifier logit moves: shuffled batch-mates {:.2g}, two threads {:.2g}, alone {:.2g}".format(*moves))
    return float(max(moves))


def _cosine_noise(registry: ModelRegistry, encoder_model: str, texts: list[str],
                  vectors: dict[str, npt.NDArray[np.float32]]) -> float:
    """The largest move of an encoder cosine between a pair's texts embedded in batches (as the tests
    do) and each text alone (INT8 dynamic quantisation: a row moves with its batch-mates)."""
    from models.loading import ModelLoader
    from workers.settings import WorkerSettings

    backend = ModelLoader(WorkerSettings(model=encoder_model, precision="int8", warmup=False,
                                         model_dir=registry.root).runtime()).load()
    unique = list(dict.fromkeys(texts))[::11]
    alone = {text: backend.infer([text])[0] for text in unique}
    return float(max(abs(float(vectors[t] @ vectors[u]) - float(alone[t] @ alone[u]))
                     for t, u in zip(unique, unique[1:])))


def gate_table(standings: list[Standing], noise: Noise) -> str:
    rows = [(s.pinned.name, f"{s.traps:.1%}", f"{s.worst_traps:.1%}", f"{s.pinned.max_traps:.0%}", f"{s.should_hit:.1%}",
             f"{s.worst_should_hit:.1%}", f"{s.pinned.min_should_hit:.0%}",
             "yes" if s.meets_target_with_margin else "NO") for s in standings]
    header = ("pinned set", "traps", "worst traps", "max", "should-hit", "worst should-hit", "min", "with margin")
    return (f"margins: verifier threshold -+ {2 * noise.logit:.3f} logits, recall threshold -+ {noise.cosine:.3f}\n"
            + format_table(header, rows, right=header[1:7]))


def _complete_records(candidates: Path, versions: dict[str, ModelManifest], verifiers: list[VerifierGates]) -> None:
    """Add what the build made of each candidate: its graphs' hashes and the figures it passed with."""
    extras = [(faq, {"heldout_accuracy": versions[f"{faq}/fp32"].check.value}) for faq in (FAQ, FAQ_MULTILINGUAL)]
    for gates in verifiers:
        figures = {"logit_noise": gates.noise.logit, "cosine_noise": gates.noise.cosine,
                   "operating_threshold": gates.verifier.threshold}
        for s in gates.standings:
            key = s.pinned.record_key
            figures |= {f"{key}.traps": s.traps, f"{key}.worst_traps": s.worst_traps,
                        f"{key}.should_hit": s.should_hit, f"{key}.worst_should_hit": s.worst_should_hit}
        extras.append((gates.verifier.manifest.name, figures))
    for name, extra in extras:
        record = read_record(name, candidates)
        graphs = {precision: versions[key].files[versions[key].onnx_file]
                  for precision in ("fp32", "int8") if (key := f"{name}/{precision}") in versions}
        updated = record.model_copy(update={"graphs": graphs, "figures": {**record.figures, **extra}})
        (artifact_dir(name, candidates) / RECORD_FILE).write_text(updated.model_dump_json(indent=1) + "\n",
                                                                  encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
