"""`python -m fleet_dev.intent_negatives`: mine the multilingual verifier's other-intent pairs
(models/build/intent_negatives.py) from its training texts, with the built FP32 e5-embed and
faq-intent-multilingual (scripts/build-models), into MINED_FILE. Seeded and deterministic; commit
the file, which the verifier's data version hashes (a change asks for scripts/train-models)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from common.settings import FleetSettings
from models.build.intent_negatives import COUNTS, MINED_FILE, mined_document, other_intent_pairs
from models.build.multilingual_pairs import chinese_sets
from models.build.verifier_data import load_verifier_dataset, project_pairs
from models.loading import ModelLoader
from models.registry import ModelRegistry
from workers import WorkerSettings


class PairTexts(Protocol):
    @property
    def a(self) -> str: ...
    @property
    def b(self) -> str: ...


def training_texts() -> dict[str, list[str]]:
    """The texts of the multilingual verifier's training pairs, per language (sorted, distinct)."""
    chinese = [pair for path in chinese_sets("train") for pair in project_pairs(path, "dev", as_split="train")]
    return {"zh": _distinct(chinese), "en": _distinct(load_verifier_dataset().train)}


def _distinct(pairs: Sequence[PairTexts]) -> list[str]:
    return sorted({text for pair in pairs for text in (pair.a, pair.b)})


def main() -> int:
    settings = FleetSettings()
    registry = ModelRegistry(settings.registry_dir)

    def fp32(name: str) -> tuple[Callable[[Sequence[str]], npt.NDArray[np.float32]], list[str], str]:
        manifest = registry.resolve(name, None, "fp32")
        backend = ModelLoader(WorkerSettings(model=name, model_dir=settings.registry_dir, precision="fp32",
                                             home=settings.home).runtime()).load()

        def batched(texts: Sequence[str]) -> npt.NDArray[np.float32]:
            return np.concatenate([backend.infer(texts[i:i + 64]) for i in range(0, len(texts), 64)])
        return batched, list(backend.manifest.labels or []), f"{manifest.id} ({manifest.files[manifest.onnx_file][:12]})"

    encode, _, encoder_id = fp32("e5-embed")
    classify, labels, classifier_id = fp32("faq-intent-multilingual")
    mined = {}
    for language, texts in training_texts().items():
        mined[language] = other_intent_pairs(texts, encode(texts), classify(texts), labels, COUNTS[language])
        print(f"{language}: {len(mined[language])} pairs from {len(texts)} texts", flush=True)
    MINED_FILE.parent.mkdir(parents=True, exist_ok=True)
    document = mined_document(mined, f"{encoder_id}, {classifier_id}")
    MINED_FILE.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"written: {MINED_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
