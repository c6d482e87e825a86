"""`fleet cache-eval`: how often the semantic cache serves a pair that should hit, and how often a trap.

For each pair (a, b) of a pairs file, a's answer is cached alone and b is looked up, through
the real `SemanticCache` with the real INT8 encoder (FLEET_SEMANTIC_ENCODER_MODEL, else the shipped
one that reads the pairs: minilm-embed, or e5-embed for Chinese) and, where one is registered, the
real verifier trained through it (fleet/commands/pair_eval.py): a should-hit pair (the file's "paraphrases", whatever their kind: a
paraphrase, a near repeat) should be served, a trap (the file's "near_misses", of ANY kind
name: negation, antonym, entity, number, date, unit, scope, or your own) must not. Every
trap counts toward the false-hit rate. The tables give the served rates per kind, without
and with the verifier, over a sweep of thresholds, and the shipped operating point. Exit
status 0 when the shipped operating point serves at most 1% of traps and at least 40% of
should-hit pairs (issue 26).

`--by-guard`: which of the guard's checks earns its place (fleet/commands/guard_ablation.py).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from fleet.arguments import command_parser
from fleet.commands.pair_eval import MAX_TRAPS, MIN_SHOULD_HIT, PAIRS_PATH, Pair, Report, Row, load_pairs, measure
from fleet.exits import Exit
from fleet.tables import format_table


def table(rows: list[Row], marks: dict[int, str]) -> str:
    """Served rates per threshold; `marks` notes a row by its index (in the last, unnamed column)."""
    kinds = sorted({kind for row in rows for kind in row.by_kind})
    figures = ("cosine", "guards", "verifier", "should-hit", "traps", *kinds)
    return format_table((*figures, ""), [
        (f"{row.threshold:.2f}", "on" if row.guards else "off", "on" if row.verifier else "off",
         f"{row.should_hit:.1%}", f"{row.traps:.1%}", *(f"{row.by_kind.get(k, 0.0):.1%}" for k in kinds),
         marks.get(i, "")) for i, row in enumerate(rows)], right=figures)


def print_report(report: Report, pairs: list[Pair]) -> None:
    counts = {kind: sum(p.kind == kind for p in pairs) for kind in sorted({p.kind for p in pairs})}
    print(f"encoder {report.encoder}; verifier {report.verifier or 'none (off, or none registered)'}; pairs: "
          + ", ".join(f"{n} {kind}" for kind, n in counts.items()))
    if report.encoder_why:
        print(f"encoder chosen for these pairs: {report.encoder_why} (FLEET_SEMANTIC_ENCODER_MODEL names one)")
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
    parser.add_argument("--by-guard", action="store_true",
                        help="per guard check, at the shipped operating point: the traps it alone stops and the "
                             "should-hit pairs it costs")
    args = parser.parse_args(argv)
    pairs = [pair for path in args.pairs for pair in load_pairs(path)]
    if args.holdout:
        pairs = [pair for pair in pairs if pair.split == "holdout"]
    if not any(p.should_hit for p in pairs) or all(p.should_hit for p in pairs):
        print(f"{' '.join(map(str, args.pairs))}: needs both should-hit pairs ('paraphrases') and traps "
              "('near_misses')", file=sys.stderr)
        return Exit.FAILED
    if args.by_guard:
        from fleet.commands.guard_ablation import by_guard

        return by_guard(pairs, args.json)
    report = measure(pairs)
    if args.json:
        print(json.dumps({"encoder": report.encoder, "encoder_why": report.encoder_why, "verifier": report.verifier,
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
