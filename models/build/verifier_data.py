"""The verifier's training and held-out pairs, and the data version a manifest records.

Training: the project's own dev pairs (workers/cache/data/semantic_pairs.json), the faq-intent
data's training questions paired by intent (models/build/verifier_faq_pairs.py) and the written
training sets (models/build/written_pairs.py). Held out: the project's holdout pairs and the
written calibration sets, which come from another brief than the training sets. The generator's
template pairs are not trained on: with them, the honest sets' best should-hit at 1% traps fell
from 45% to 31% (docs/concepts/semantic-cache.md); they remain a probe whose per-kind rates the
manifest records. The version string hashes the training and held-out pairs themselves
(`pairs_digest`): a changed labelling or set is a new data version, and a change to the code that
makes the same pairs (or to the probe, which nothing learns from) is not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from models.build import written_pairs
from models.build.verifier_faq_pairs import faq_pairs
from models.build.verifier_pairs import PairExample, generate_pairs
from models.same_question import normal_form

DATA_NAME = "verifier-pairs-v3"
_ROOT = Path(__file__).resolve().parents[2]
PROJECT_PAIRS = _ROOT / "workers" / "cache" / "data" / "semantic_pairs.json"


@dataclass(frozen=True)
class VerifierDataset:
    version: str
    train: tuple[PairExample, ...]
    heldout: tuple[PairExample, ...]  # calibrates the threshold and gates the version
    probe: tuple[PairExample, ...]  # the generator's pairs: per-kind figures in the manifest, nothing more


# The pairs file's trap kinds, as the generator names them: calibration weighs kinds alike, and a
# kind of its own of 8 held-out pairs would let one pair move the threshold by a whole step.
_PROJECT_KINDS = {"opposite": "antonym", "negation": "negation", "entity": "entity", "number": "number"}


def project_pairs(path: Path, split: str, *, as_split: str | None = None) -> list[PairExample]:
    """The project's pairs file: paraphrases should hit, near misses are traps of their kind."""
    data = json.loads(path.read_text(encoding="utf-8"))
    label = as_split or split
    hits = [PairExample(p["a"], p["b"], "paraphrase", label) for p in data["paraphrases"]
            if p.get("split", "dev") == split]
    traps = [PairExample(p["a"], p["b"], _PROJECT_KINDS.get(p["kind"], p["kind"]), label) for p in data["near_misses"]
             if p.get("split", "dev") == split]
    return hits + traps


def load_verifier_dataset(pairs_file: Path = PROJECT_PAIRS) -> VerifierDataset:
    train_sets, calibration_sets = written_pairs.written_sets("train"), written_pairs.written_sets("calibration")
    heldout = project_pairs(pairs_file, "holdout") + [
        pair for path in calibration_sets
        for pair in project_pairs(path, "dev", as_split="calibration")]
    # Writers converge on common questions: a pair also held out (either way round) is not trained on.
    held = {key for pair in heldout for key in _keys(pair)}
    train = [pair for pair in project_pairs(pairs_file, "dev") + faq_pairs("train") + [
        pair for path in train_sets for pair in project_pairs(path, "dev", as_split="train")]
        if not held.intersection(_keys(pair))]
    return VerifierDataset(f"{DATA_NAME} sha256:{pairs_digest(train, heldout)}", tuple(train), tuple(heldout),
                           tuple(generate_pairs("calibration")))


def pairs_digest(*pair_lists: Sequence[PairExample]) -> str:
    """The first 12 hex digits of a sha256 over the pairs, in order (each list closed by a separator)."""
    digest = hashlib.sha256()
    for pairs in pair_lists:
        for pair in pairs:
            digest.update(json.dumps([pair.a, pair.b, pair.kind, pair.split], ensure_ascii=False).encode("utf-8") + b"\n")
        digest.update(b"\x00\n")
    return digest.hexdigest()[:12]


def _keys(pair: PairExample) -> tuple[tuple[str, str], tuple[str, str]]:
    a, b = normal_form(pair.a), normal_form(pair.b)
    return (a, b), (b, a)
