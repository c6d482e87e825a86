"""The verifier's training and held-out pairs, and the data version a manifest records.

Training: the generator's training split plus the project's own dev pairs
(workers/cache/data/semantic_pairs.json). Held out: the generator's calibration split (its
own templates and words) plus the project's holdout pairs. The version string hashes the
generator's sources, this module (it names the held-out kinds) and the pairs file, so a changed
generator or labelling is a new data version.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from models.build import verifier_lexicon, verifier_pairs, verifier_templates
from models.build.verifier_pairs import PairExample, generate_pairs

DATA_NAME = "verifier-pairs-v2"
_ROOT = Path(__file__).resolve().parents[2]
PROJECT_PAIRS = _ROOT / "workers" / "cache" / "data" / "semantic_pairs.json"
# Pair sets people wrote (tests/data): trained on, all of them, for wording no template has.
# outsider_pairs_5.json stays out of training and calibration: it is the honest test.
WRITTEN_PAIRS = tuple(_ROOT / "tests" / "data" / name for name in (
    "outsider_pairs.json", "outsider_pairs_2.json", "outsider_pairs_3.json", "outsider_pairs_4.json"))


@dataclass(frozen=True)
class VerifierDataset:
    version: str
    train: tuple[PairExample, ...]
    heldout: tuple[PairExample, ...]


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
    digest = hashlib.sha256()
    for module in (verifier_pairs, verifier_templates, verifier_lexicon, sys.modules[__name__]):
        digest.update(Path(str(module.__file__)).read_bytes())
    for path in (pairs_file, *WRITTEN_PAIRS):
        digest.update(path.read_bytes())
    written = [pair for path in WRITTEN_PAIRS for pair in project_pairs(path, "dev", as_split="train")]
    train = generate_pairs("train") + project_pairs(pairs_file, "dev") + written
    heldout = generate_pairs("calibration") + project_pairs(pairs_file, "holdout")
    return VerifierDataset(f"{DATA_NAME} sha256:{digest.hexdigest()[:12]}", tuple(train), tuple(heldout))
