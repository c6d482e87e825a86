"""`fleet cache-eval`: how often the semantic cache serves a pair that should hit, and how often a trap.

For each pair (a, b) of a pairs file, a's answer is cached alone and b is looked up, through
the real `SemanticCache` with the real INT8 MiniLM encoder and, where one is registered, the
real cache-verifier: a should-hit pair (the file's "paraphrases", whatever their kind: a
paraphrase, a near repeat) should be served, a trap (the file's "near_misses", of ANY kind
name: negation, antonym, entity, number, date, unit, scope, or your own) must not. Every
trap counts toward the false-hit rate. The tables give the served rates per kind, without
and with the verifier, over a sweep of thresholds, and the shipped operating point. Exit
status 0 when the shipped operating point serves at most 1% of traps and at least 40% of
should-hit pairs (issue 26).
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
from workers import SEMANTIC_THRESHOLD, CacheVerifier, SemanticCache, WorkerSettings, meaning_conflict

PAIRS_PATH = Path(__file__).resolve().parents[2] / "workers" / "cache" / "data" / "semantic_pairs.json"
THRESHOLDS = (0.55, 0.60, 0.65, 0.70, 0.75, 0.80, 0.85, 0.90, 0.95)
MIN_SHOULD_HIT = 0.40
MAX_TRAPS = 0.01
SHIPPED_RECALL_THRESHOLD: float = WorkerSettings.model_fields["semantic_recall_threshold"].default

Vectors = dict[str, npt.NDArray[np.float32]]


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    kind: str
    should_hit: bool
    split: str = "dev"  # "holdout": written after the guard's word lists, never used to train or tune


@dataclass(frozen=True)
class Row:
    threshold: float
    guards: bool
    verifier: bool
    should_hit: float  # share of should-hit pairs served
    traps: float  # share of traps served (every kind)
    by_kind: dict[str, float]

    @property
    def meets_targets(self) -> bool:
        return self.should_hit >= MIN_SHOULD_HIT and self.traps <= MAX_TRAPS


def load_pairs(path: Path = PAIRS_PATH) -> list[Pair]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [Pair(p["a"], p["b"], p.get("kind", "paraphrase"), True, p.get("split", "dev"))
            for p in data.get("paraphrases", [])] + \
        [Pair(p["a"], p["b"], p.get("kind", "near_miss"), False, p.get("split", "dev"))
         for p in data.get("near_misses", [])]


def served(pairs: list[Pair], vectors: Vectors, threshold: float, guards: bool,
           verdicts: npt.NDArray[np.float32] | None = None, verifier_threshold: float = 0.0,
           unreadable: frozenset[str] = frozenset()) -> list[bool]:
    """Per pair: whether b is answered from a cache holding only a's answer; with `verdicts` (the
    verifier's P(same) of (b, a) per pair), only when the verifier accepts it too. A pair with a
    text in `unreadable` (too many tokens unknown to the encoder) is never served, as in a worker."""
    dim = len(next(iter(vectors.values())))
    cache = SemanticCache(dim, threshold=threshold, capacity=16, verify_fraction=0.0,
                          guard=meaning_conflict if guards else None)
    out: list[bool] = []
    for i, pair in enumerate(pairs):
        if pair.a in unreadable or pair.b in unreadable:
            out.append(False)
            continue
        cache.clear()
        cache.add([pair.a], vectors[pair.a][None, :], [b"a"])
        found = bool(cache.candidates([pair.b], vectors[pair.b][None, :])[0])
        out.append(found and (verdicts is None or float(verdicts[i]) >= verifier_threshold))
    return out


def evaluate(pairs: list[Pair], vectors: Vectors, threshold: float, guards: bool,
             verdicts: npt.NDArray[np.float32] | None = None, verifier_threshold: float = 0.0,
             unreadable: frozenset[str] = frozenset()) -> Row:
    hits = served(pairs, vectors, threshold, guards, verdicts, verifier_threshold, unreadable)

    def rate(chosen: list[bool]) -> float:
        return sum(chosen) / len(chosen) if chosen else 0.0

    kinds = sorted({pair.kind for pair in pairs})
    return Row(threshold, guards, verdicts is not None,
               rate([hit for hit, pair in zip(hits, pairs) if pair.should_hit]),
               rate([hit for hit, pair in zip(hits, pairs) if not pair.should_hit]),
               {kind: rate([hit for hit, pair in zip(hits, pairs) if pair.kind == kind]) for kind in kinds})


@dataclass(frozen=True)
class Embedded:
    encoder: str  # the encoder's version id
    vectors: Vectors
    unreadable: frozenset[str]  # texts a worker would neither look up nor cache


def embed_all(texts: list[str], registry_dir: Path | None = None, encoder_model: str | None = None) -> Embedded:
    """Every text through the semantic cache's encoder, as a worker's settings name it (or `encoder_model`)."""
    from models import ModelLoader, infer_in_chunks

    where = {} if registry_dir is None else {"model_dir": registry_dir}
    if encoder_model is not None:
        where["semantic_encoder_model"] = encoder_model
    settings = WorkerSettings(model="minilm-embed", precision="int8", warmup=False, **where)
    encoder = ModelLoader(settings.runtime()).load_encoder(settings.semantic_encoder_model,
                                                           settings.semantic_encoder_precision)
    unique = list(dict.fromkeys(texts))
    rows = infer_in_chunks(encoder, unique)
    shares = encoder.unknown_shares(unique)
    unreadable = frozenset(text for text, share in zip(unique, shares) if share > settings.semantic_max_unknown_share)
    return Embedded(encoder.manifest.id, dict(zip(unique, rows)), unreadable)


def open_verifier() -> CacheVerifier | None:
    from models import ModelRegistry

    settings = WorkerSettings(model="minilm-embed")
    return CacheVerifier.newest(ModelRegistry(settings.registry_dir), name=settings.semantic_verifier_model)


def table(rows: list[Row], marks: dict[int, str]) -> str:
    """Served rates per threshold; `marks` notes a row by its index (in the last, unnamed column)."""
    kinds = sorted({kind for row in rows for kind in row.by_kind})
    figures = ("cosine", "guards", "verifier", "should-hit", "traps", *kinds)
    return format_table((*figures, ""), [
        (f"{row.threshold:.2f}", "on" if row.guards else "off", "on" if row.verifier else "off",
         f"{row.should_hit:.1%}", f"{row.traps:.1%}", *(f"{row.by_kind.get(k, 0.0):.1%}" for k in kinds),
         marks.get(i, "")) for i, row in enumerate(rows)], right=figures)


@dataclass(frozen=True)
class Report:
    encoder: str
    verifier: str | None
    verifier_threshold: float | None
    shipped: Row
    rows: list[Row]
    served_traps: list[Pair]
    unreadable_pairs: int = 0  # pairs with a text the encoder cannot read: never served
    unjudged_pairs: int = 0  # pairs with a token the verifier cannot read: never served where it decides


def measure(pairs: list[Pair]) -> Report:
    embedded = embed_all([text for pair in pairs for text in (pair.a, pair.b)])
    vectors, unreadable = embedded.vectors, embedded.unreadable
    verifier = open_verifier()
    judged = verifier.score([(pair.b, pair.a) for pair in pairs]) if verifier is not None else None
    verdicts = judged.scores if judged is not None else None
    v_threshold = verifier.threshold if verifier is not None else 0.0
    rows = [evaluate(pairs, vectors, t, guards, unreadable=unreadable) for t in THRESHOLDS for guards in (True, False)]
    if verdicts is not None:
        rows += [evaluate(pairs, vectors, t, True, verdicts, v_threshold, unreadable) for t in THRESHOLDS]
        shipped = evaluate(pairs, vectors, SHIPPED_RECALL_THRESHOLD, True, verdicts, v_threshold, unreadable)
        hits = served(pairs, vectors, SHIPPED_RECALL_THRESHOLD, True, verdicts, v_threshold, unreadable)
    else:
        shipped = evaluate(pairs, vectors, SEMANTIC_THRESHOLD, True, unreadable=unreadable)
        hits = served(pairs, vectors, SEMANTIC_THRESHOLD, True, unreadable=unreadable)
    wrong = [pair for pair, hit in zip(pairs, hits) if hit and not pair.should_hit]
    unread = sum(pair.a in unreadable or pair.b in unreadable for pair in pairs)
    return Report(embedded.encoder, verifier.manifest.id if verifier is not None else None,
                  verifier.threshold if verifier is not None else None, shipped, rows, wrong, unread,
                  judged.unreadable if judged is not None else 0)


def print_report(report: Report, pairs: list[Pair]) -> None:
    counts = {kind: sum(p.kind == kind for p in pairs) for kind in sorted({p.kind for p in pairs})}
    print(f"encoder {report.encoder}; verifier {report.verifier or 'none registered'}; pairs: "
          + ", ".join(f"{n} {kind}" for kind, n in counts.items()))
    point = (f"cosine >= {report.shipped.threshold:.2f}, guards on, verifier P(same) >= {report.verifier_threshold:.4f}"
             if report.verifier is not None else f"cosine >= {report.shipped.threshold:.2f}, guards on, no verifier")
    print(f"operating point: {point}")
    if report.unreadable_pairs:
        print(f"{report.unreadable_pairs} of {len(pairs)} pairs have a text {report.encoder} cannot read (unknown "
              "tokens): never served, at any threshold (FLEET_SEMANTIC_ENCODER_MODEL picks an encoder that reads it)")
    if report.unjudged_pairs:
        print(f"{report.unjudged_pairs} of {len(pairs)} pairs have a token {report.verifier} cannot read: never served "
              "where it decides (FLEET_SEMANTIC_VERIFIER_MODEL=cache-verifier-multilingual reads Chinese; "
              "FLEET_SEMANTIC_VERIFIER=false with FLEET_SEMANTIC_MAX_WRONG_RATE lets the learned bound decide)")
    print("served = share of pairs whose b is answered with a's cached answer (trap columns: lower is better)\n")
    print(table([report.shipped, *report.rows], {0: "<- shipped operating point"}))
    verdict = "meets" if report.shipped.meets_targets else "MISSES"
    print(f"\nshipped operating point {verdict} the targets (>= {MIN_SHOULD_HIT:.0%} should-hit, <= {MAX_TRAPS:.0%} "
          f"traps): {report.shipped.should_hit:.1%} should-hit, {report.shipped.traps:.1%} traps")
    for pair in report.served_traps:
        print(f"  trap served [{pair.kind}]: {pair.a!r} -> {pair.b!r}")


def main(argv: list[str]) -> int:
    parser = command_parser("cache-eval", __doc__)
    parser.add_argument("--pairs", type=Path, nargs="+", default=[PAIRS_PATH],
                        help="pairs files (JSON: paraphrases, near_misses), measured together")
    parser.add_argument("--holdout", action="store_true", help="only the pairs marked split: holdout")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    args = parser.parse_args(argv)
    pairs = [pair for path in args.pairs for pair in load_pairs(path)]
    if args.holdout:
        pairs = [pair for pair in pairs if pair.split == "holdout"]
    if not any(p.should_hit for p in pairs) or all(p.should_hit for p in pairs):
        print(f"{' '.join(map(str, args.pairs))}: needs both should-hit pairs ('paraphrases') and traps "
              "('near_misses')", file=sys.stderr)
        return Exit.FAILED
    report = measure(pairs)
    if args.json:
        print(json.dumps({"encoder": report.encoder, "verifier": report.verifier,
                          "unreadable_pairs": report.unreadable_pairs, "unjudged_pairs": report.unjudged_pairs,
                          "verifier_threshold": report.verifier_threshold,
                          "shipped": asdict(report.shipped) | {"meets_targets": report.shipped.meets_targets},
                          "traps_served_at_shipped": [asdict(p) for p in report.served_traps],
                          "rows": [asdict(row) for row in report.rows]}, indent=1))
    else:
        print_report(report, pairs)
    return Exit.OK if report.shipped.meets_targets else Exit.FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
