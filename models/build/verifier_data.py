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
PROJECT_PAIRS = Path(__file__).resolve().parents[2] / "workers" / "cache" / "data" / "semantic_pairs.json"


@dataclass(frozen=True)
class VerifierDataset:
    version: str
    train: tuple[PairExample, ...]
    heldout: tuple[PairExample, ...]


# The pairs file's trap kinds, as the generator names them: calibration weighs kinds alike, and a
# kind of its own of 8 held-out pairs would let one pair move the threshold by a whole step.
_PROJECT_KINDS = {"opposite": "antonym", "negation": "negation", "entity": "entity", "number": "number"}


def project_pairs(path: Path, split: str) -> list[PairExample]:
    """The project's pairs file: paraphrases should hit, near misses are traps of their kind."""
    data = json.loads(path.read_text(encoding="utf-8"))
    hits = [PairExample(p["a"], p["b"], "paraphrase", split) for p in data["paraphrases"]
            if p.get("split", "dev") == split]
    traps = [PairExample(p["a"], p["b"], _PROJECT_KINDS.get(p["kind"], p["kind"]), split) for p in data["near_misses"]
             if p.get("split", "dev") == split]
    return hits + traps


def load_verifier_dataset(pairs_file: Path = PROJECT_PAIRS) -> VerifierDataset:
    digest = hashlib.sha256()
    for module in (verifier_pairs, verifier_templates, verifier_lexicon, sys.modules[__name__]):
        digest.update(Path(str(module.__file__)).read_bytes())
    digest.update(pairs_file.read_bytes())
    train = generate_pairs("train") + project_pairs(pairs_file, "dev")
    heldout = generate_pairs("calibration") + project_pairs(pairs_file, "holdout")
    return VerifierDataset(f"{DATA_NAME} sha256:{digest.hexdigest()[:12]}", tuple(train), tuple(heldout))
