"""`fleet cache-eval`: how often the semantic cache serves a paraphrase, and how often a near miss.

For each pair (a, b) of workers/cache/data/semantic_pairs.json, a's answer is cached alone
and b is looked up, through the real `SemanticCache` with the real INT8 MiniLM encoder: a
paraphrase should hit, a near miss (a number, negation, opposite or entity changed) must
not. The table sweeps thresholds with and without the guards; the shipped default must
reach >= 30% paraphrase hits with <= 2% near-miss hits (issue 4). Exit status 0 when it does.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from fleet.arguments import command_parser
from fleet.exits import Exit
from fleet.tables import format_table
from workers.cache.guards import meaning_conflict
from workers.cache.semantic import DEFAULT_THRESHOLD, Guard, SemanticCache

PAIRS_PATH = Path(__file__).resolve().parents[2] / "workers" / "cache" / "data" / "semantic_pairs.json"
THRESHOLDS = (0.80, 0.85, 0.88, 0.89, 0.90, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98)
MIN_PARAPHRASE_HITS = 0.30
MAX_NEAR_MISS_HITS = 0.02
KINDS = ("number", "negation", "opposite", "entity")


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    kind: str  # "paraphrase" or the near-miss kind
    split: str = "dev"  # "holdout": written after the guard's word lists, never used to tune them


@dataclass(frozen=True)
class Row:
    threshold: float
    guards: bool
    paraphrase_hits: float
    near_miss_hits: float
    by_kind: dict[str, float]

    @property
    def meets_targets(self) -> bool:
        return self.paraphrase_hits >= MIN_PARAPHRASE_HITS and self.near_miss_hits <= MAX_NEAR_MISS_HITS


def load_pairs(path: Path = PAIRS_PATH) -> list[Pair]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [Pair(p["a"], p["b"], "paraphrase", p.get("split", "dev")) for p in data["paraphrases"]] + \
        [Pair(p["a"], p["b"], p["kind"], p.get("split", "dev")) for p in data["near_misses"]]


def served(pairs: list[Pair], vectors: dict[str, npt.NDArray[np.float32]], threshold: float,
           guard: Guard | None) -> list[bool]:
    """Per pair: whether b is answered from a cache holding only a's answer."""
    dim = len(next(iter(vectors.values())))
    cache = SemanticCache(dim, threshold=threshold, capacity=16, verify_fraction=0.0, guard=guard)
    out: list[bool] = []
    for pair in pairs:
        cache.clear()
        cache.add([pair.a], vectors[pair.a][None, :], [b"a"])
        out.append(cache.lookup([pair.b], vectors[pair.b][None, :])[0] is not None)
    return out


def evaluate(pairs: list[Pair], vectors: dict[str, npt.NDArray[np.float32]], threshold: float, guards: bool) -> Row:
    hits = served(pairs, vectors, threshold, meaning_conflict if guards else None)

    def rate(kinds: tuple[str, ...]) -> float:
        chosen = [hit for hit, pair in zip(hits, pairs) if pair.kind in kinds]
        return sum(chosen) / len(chosen) if chosen else 0.0

    return Row(threshold, guards, rate(("paraphrase",)), rate(KINDS), {kind: rate((kind,)) for kind in KINDS})


def recommend(rows: list[Row]) -> tuple[float | None, str]:
    """The seed's 0.95 when it meets both targets with guards, else the highest guarded threshold that does."""
    guarded = {row.threshold: row for row in rows if row.guards}
    seed = guarded.get(0.95)
    if seed is not None and seed.meets_targets:
        return 0.95, "the seed's 0.95 meets both targets with the guards on"
    meeting = sorted((t for t, row in guarded.items() if row.meets_targets), reverse=True)
    if not meeting:
        return None, "no threshold meets both targets: keep the cache off for this model"
    return meeting[0], (f"0.95 misses a target; {meeting[0]:.2f} is the highest threshold with >= "
                        f"{MIN_PARAPHRASE_HITS:.0%} paraphrase and <= {MAX_NEAR_MISS_HITS:.0%} near-miss hits")


def embed_all(texts: list[str]) -> tuple[str, dict[str, npt.NDArray[np.float32]]]:
    from models.loading import ModelLoader
    from workers.settings import WorkerSettings

    backend = ModelLoader(WorkerSettings(model="minilm-embed", precision="int8", warmup=False).runtime()).load()
    unique = list(dict.fromkeys(texts))
    rows = np.concatenate([backend.infer(unique[i:i + 64]) for i in range(0, len(unique), 64)])
    return backend.manifest.id, dict(zip(unique, rows))


FIGURES = ("threshold", "guards", "paraphrase", "near-miss", *KINDS)


def table(rows: list[Row], marks: dict[int, str]) -> str:
    """Hit rates per threshold; `marks` notes a row by its index (in the last, unnamed column)."""
    return format_table((*FIGURES, ""), [
        (f"{row.threshold:.2f}", "on" if row.guards else "off", f"{row.paraphrase_hits:.1%}", f"{row.near_miss_hits:.1%}",
         *(f"{row.by_kind[k]:.1%}" for k in KINDS), marks.get(i, "")) for i, row in enumerate(rows)], right=FIGURES)


def main(argv: list[str]) -> int:
    parser = command_parser("cache-eval", __doc__)
    parser.add_argument("--pairs", type=Path, default=PAIRS_PATH, help="pairs file (JSON)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    pairs = load_pairs(args.pairs)
    holdout = [pair for pair in pairs if pair.split == "holdout"]
    version, vectors = embed_all([text for pair in pairs for text in (pair.a, pair.b)])
    rows = [evaluate(pairs, vectors, t, guards) for t in THRESHOLDS for guards in (True, False)]
    default = evaluate(pairs, vectors, DEFAULT_THRESHOLD, True)
    recommended, reason = recommend(rows)
    held = [evaluate(holdout, vectors, t, guards) for t in dict.fromkeys((DEFAULT_THRESHOLD, 0.95))
            for guards in (True, False)] if holdout else []
    default_hits = served(pairs, vectors, DEFAULT_THRESHOLD, meaning_conflict)
    false_hits = [pair for pair, hit in zip(pairs, default_hits) if hit and pair.kind != "paraphrase"]
    counts = {kind: sum(p.kind == kind for p in pairs) for kind in ("paraphrase", *KINDS)}
    if args.json:
        print(json.dumps({"encoder": version, "pairs": counts, "holdout_pairs": len(holdout),
                          "default": asdict(default) | {"meets_targets": default.meets_targets},
                          "recommended_threshold": recommended, "reason": reason,
                          "near_misses_served_at_default": [asdict(p) for p in false_hits],
                          "rows": [asdict(row) for row in rows], "holdout_rows": [asdict(row) for row in held]},
                         indent=1))
    else:
        print(f"encoder {version}; pairs: " + ", ".join(f"{n} {kind}" for kind, n in counts.items()))
        print("hit rate = share of pairs whose b is served a's cached answer (near-miss columns: lower is better)\n")
        print(table([default, *rows], {0: "<- shipped default"}))
        print(f"\nrecommended threshold: {recommended} ({reason})")
        if held:
            print(f"\nholdout only ({len(holdout)} pairs written after the guard lists were frozen):")
            print(table(held, {0: "<- shipped default"}))
        for pair in false_hits:
            print(f"  near miss served at the default [{pair.kind}]: {pair.a!r} -> {pair.b!r}")
    return Exit.OK if default.meets_targets else Exit.FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
