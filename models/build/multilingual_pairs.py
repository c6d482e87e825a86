"""The multilingual verifier's pairs: the English verifier's, and Chinese ones.

- Training: the English dataset's training pairs (models/build/verifier_data.py) and the written
  Chinese sets in `models/build/data/written_pairs/zh/train/`, five briefs: FAQ pages, customers in
  chat, service hotlines, many kinds of writer, a tester out to fool the cache.
- Held out (the threshold is calibrated on them, per language): the English dataset's held-out
  pairs, the dev split of workers/cache/data/semantic_pairs_zh.json and the written Chinese sets in
  `.../zh/calibration/`, from a brief of their own.
- Unrelated pairs, in training only: two questions of different written pairs, far apart in
  character bigrams, in one language or one of each (`unrelated_pairs`). Taught on pairs that look
  alike alone, a first model scored "How do I reset my password?" against "今天天气怎么样" 0.998
  "same": nothing alike meant nothing changed to it. MiniLM's verifier never meets such a pair (its
  encoder's cosine drops them below the recall threshold); e5-embed's cosines put unrelated
  questions above it, so its verifier must refuse them itself. A few: 1,500 of them (600 Chinese)
  taught a second model that Chinese pairs worded apart differ, paraphrases included (held-out
  Chinese should-hit 5%). Not held out: easy traps would dilute the held-out trap rate.
- Other-intent pairs, in training only: two training questions e5-embed puts close that the
  fleet's own classifier answers differently (models/build/intent_negatives.py, its file
  `MINED_FILE`). Without them the verifier called such questions the same: on the Chinese cache
  bench's stream 83 of its 494 semantic hits served another intent's answer.
- In neither: the holdout split of semantic_pairs_zh.json and the Chinese cache bench's stream
  (workers/cache/data/cache-stream-zh.json), which judge the result. A written pair with a text
  near one of theirs is removed when the set is added (`python -m models.build.multilingual_pairs
  FILE... --into train|calibration`): near is a character-bigram cosine of `NEAR_BIGRAM_COSINE` or
  more, a rule for any script that trusts no encoder ("怎么申请退款" / "如何申请退款" sit at 0.6).

The data version is a hash of the training and held-out pairs (`verifier_data.pairs_digest`).
"""

from __future__ import annotations

import argparse
import random
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from models.build.intent_negatives import MINED_FILE
from models.build.verifier_data import VerifierDataset, load_verifier_dataset, pairs_digest, project_pairs
from models.build.verifier_pairs import PairExample
from models.build.written_pairs import WRITTEN_DIR, GROUPS, add_sets, pair_texts, read_pairs
from models.same_question import normal_form

DATA_NAME = "verifier-pairs-multilingual-v1"
_ROOT = Path(__file__).resolve().parents[2]
CHINESE_PROJECT_PAIRS = _ROOT / "workers" / "cache" / "data" / "semantic_pairs_zh.json"
CHINESE_STREAM = _ROOT / "workers" / "cache" / "data" / "cache-stream-zh.json"
CHINESE_DIR = WRITTEN_DIR / "zh"
NEAR_BIGRAM_COSINE = 0.80
UNRELATED_BIGRAM_COSINE = 0.20  # at most this alike to count as unrelated
UNRELATED_TRAIN = (150, 300, 150)  # unrelated training pairs: Chinese, English, one of each
_BIGRAM_WIDTH = 1 << 16


def chinese_sets(group: str) -> tuple[Path, ...]:
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r}; expected one of {GROUPS}")
    return tuple(sorted((CHINESE_DIR / group).glob("*.json")))


def load_multilingual_dataset() -> VerifierDataset:
    """No generator probe: its pairs are English, and the English verifier's manifest holds their figures."""
    english = load_verifier_dataset()
    train_sets, calibration_sets = chinese_sets("train"), chinese_sets("calibration")
    chinese_heldout = [*project_pairs(CHINESE_PROJECT_PAIRS, "dev", as_split="calibration"),
                       *(pair for path in calibration_sets for pair in project_pairs(path, "dev", as_split="calibration"))]
    held = {(normal_form(pair.a), normal_form(pair.b)) for pair in (*english.heldout, *chinese_heldout)}
    held |= {(b, a) for a, b in held}
    chinese = [pair for path in train_sets for pair in project_pairs(path, "dev", as_split="train")
               if (normal_form(pair.a), normal_form(pair.b)) not in held]
    other_intent = [pair for pair in project_pairs(MINED_FILE, "dev", as_split="train")
                    if (normal_form(pair.a), normal_form(pair.b)) not in held]
    train = [*english.train, *chinese, *unrelated_pairs(chinese, english.train, UNRELATED_TRAIN, "train"), *other_intent]
    heldout = [*english.heldout, *chinese_heldout]
    return VerifierDataset(f"{DATA_NAME} sha256:{pairs_digest(train, heldout)}", tuple(train), tuple(heldout), ())


def unrelated_pairs(chinese: Sequence[PairExample], english: Sequence[PairExample], counts: tuple[int, int, int],
                    split: str, seed: int = 0) -> list[PairExample]:
    """`counts` pairs (Chinese, English, one of each) of first texts of different pairs, at most
    UNRELATED_BIGRAM_COSINE alike: traps of kind "unrelated". Seeded: the same pairs every time."""
    rng = random.Random(seed)
    zh, en = sorted({pair.a for pair in chinese}), sorted({pair.a for pair in english})
    out: list[PairExample] = []
    for (left, right), count in zip(((zh, zh), (en, en), (zh, en)), counts, strict=True):
        seen: set[tuple[str, str]] = set()
        for _ in range(count * 20):
            if len(seen) == count:
                break
            a, b = rng.choice(left), rng.choice(right)
            rows = bigram_rows([a, b])
            if a != b and (a, b) not in seen and float(rows[0] @ rows[1]) <= UNRELATED_BIGRAM_COSINE:
                seen.add((a, b))
                out.append(PairExample(a, b, "unrelated", split))
    return out


def bigram_rows(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    """Unit rows of character-bigram counts of each normal form, hashed into a fixed width."""
    rows = np.zeros((len(texts), _BIGRAM_WIDTH), dtype=np.float32)
    for row, text in enumerate(texts):
        form = normal_form(text)
        for i in range(max(1, len(form) - 1)):
            rows[row, zlib.crc32(form[i:i + 2].encode("utf-8")) % _BIGRAM_WIDTH] += 1.0
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def chinese_honest_texts() -> list[str]:
    """The texts that judge the multilingual verifier: no written pair may come near them."""
    pairs = read_pairs(CHINESE_PROJECT_PAIRS)
    held = {key: [p for p in pairs[key] if p.get("split") == "holdout"] for key in ("paraphrases", "near_misses")}
    stream = [text for group in read_pairs(CHINESE_STREAM)["groups"]
              for text in (group["question"], *group["paraphrases"], *(trap["text"] for trap in group["traps"]))]
    return [*pair_texts(held), *stream]


def decontaminate(data: dict[str, Any], honest: Sequence[str]) -> tuple[dict[str, Any], int]:
    """`data` without the pairs with a text near an honest one (NEAR_BIGRAM_COSINE)."""
    texts = list(dict.fromkeys(pair_texts(data)))
    nearest = (bigram_rows(texts) @ bigram_rows(list(dict.fromkeys(honest))).T).max(axis=1)
    near = {text for text, cosine in zip(texts, nearest, strict=True) if cosine >= NEAR_BIGRAM_COSINE}
    kept = {key: [p for p in data.get(key, []) if p["a"] not in near and p["b"] not in near]
            for key in ("paraphrases", "near_misses")}
    removed = sum(len(data.get(key, [])) - len(kept[key]) for key in kept)
    note = (f"{removed} pairs with a text within character-bigram cosine {NEAR_BIGRAM_COSINE} of a text of the "
            "Chinese holdout pairs or cache stream were removed (models/build/multilingual_pairs.py)")
    return {"about": data.get("about", ""), "decontaminated": note, **kept}, removed


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.build.multilingual_pairs",
                                     description="Add written Chinese pair sets to the multilingual verifier's data, "
                                                 "without the pairs near a text that judges it.")
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--into", choices=GROUPS, required=True)
    args = parser.parse_args(argv)
    honest = chinese_honest_texts()
    add_sets(args.files, CHINESE_DIR / args.into, lambda pairs: decontaminate(pairs, honest))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
