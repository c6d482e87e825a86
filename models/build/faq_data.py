"""The labelled customer-support FAQ examples the faq-intent heads are trained and scored on.

One JSON file per data version and language, shipped with the code: English (faq-intents-v1) and
Chinese (faq-intents-zh-v1), the same intents in the same order. A multilingual head learns from
both; its held-out examples are scored per language, so one language cannot hide behind another. The version string written into a
manifest's `training_data` carries the file's sha256 as well as its name, so an edited file
can never pass for the data a registered version was trained on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from models.registry import sha256_of

DATA_DIR = Path(__file__).resolve().parent / "data"
FAQ_DATA_VERSION = "faq-intents-v1"
FAQ_DATA_FILE = DATA_DIR / f"{FAQ_DATA_VERSION}.json"
FAQ_ZH_DATA_FILE = DATA_DIR / "faq-intents-zh-v1.json"
# Prefix of the file's sha256 named in the version string: enough to tell edits apart.
_HASH_PREFIX_CHARS = 12


@dataclass(frozen=True)
class Example:
    text: str
    label: int  # index into FaqDataset.labels


@dataclass(frozen=True)
class FaqDataset:
    version: str  # "<name> sha256:<first 12 hex>", what the manifest records
    labels: tuple[str, ...]  # intent names, in output-column order
    train: tuple[Example, ...]
    test: tuple[Example, ...]  # held out: never trained on, only scored
    # (data version, number of examples) of each file's part of `test`, in order: each is scored on its own
    test_parts: tuple[tuple[str, int], ...] = ()

    @property
    def all_examples(self) -> tuple[Example, ...]:
        return self.train + self.test


def load_faq_dataset(path: Path = FAQ_DATA_FILE) -> FaqDataset:
    """Read and validate a data file; a malformed one stops the build with its reason."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    name = raw.get("version")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{path}: missing 'version'")
    intents = raw.get("intents")
    if not isinstance(intents, list) or len(intents) < 2:
        raise ValueError(f"{path}: needs at least two intents")
    labels: list[str] = []
    train: list[Example] = []
    test: list[Example] = []
    seen: dict[str, str] = {}
    for index, intent in enumerate(intents):
        label = intent["name"]
        if label in labels:
            raise ValueError(f"{path}: intent {label!r} appears twice")
        labels.append(label)
        for split, into in (("train", train), ("test", test)):
            texts = intent.get(split)
            if not isinstance(texts, list) or not texts:
                raise ValueError(f"{path}: intent {label!r} has no {split} examples")
            for text in texts:
                # A sentence in two intents (or in train and test) would make the scores lie.
                key = " ".join(str(text).lower().split())
                if key in seen:
                    raise ValueError(f"{path}: {text!r} appears in {seen[key]} and in {label}/{split}")
                seen[key] = f"{label}/{split}"
                into.append(Example(text=str(text), label=index))
    digest = sha256_of(path)[:_HASH_PREFIX_CHARS]
    version = f"{name} sha256:{digest}"
    return FaqDataset(version=version, labels=tuple(labels), train=tuple(train), test=tuple(test),
                      test_parts=((name, len(test)),))


def load_faq_datasets(paths: tuple[Path, ...]) -> FaqDataset:
    """Several data files as one: their intents must be the same, in the same order."""
    parts = [load_faq_dataset(path) for path in paths]
    first = parts[0]
    for path, part in zip(paths, parts, strict=True):
        if part.labels != first.labels:
            raise ValueError(f"{path}: its intents {part.labels} are not {paths[0].name}'s {first.labels}")
    seen = {" ".join(e.text.lower().split()) for e in first.all_examples}
    for path, part in zip(paths[1:], parts[1:], strict=True):
        for example in part.all_examples:
            if (key := " ".join(example.text.lower().split())) in seen:
                raise ValueError(f"{path}: {example.text!r} appears in another data file too")
            seen.add(key)
    return FaqDataset(version=" + ".join(part.version for part in parts), labels=first.labels,
                      train=tuple(e for part in parts for e in part.train),
                      test=tuple(e for part in parts for e in part.test),
                      test_parts=tuple(entry for part in parts for entry in part.test_parts))
