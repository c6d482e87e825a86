"""`fleet cache-eval --by-guard`: which of the guard's checks earns its place.

At the shipped operating point, per check: the traps it alone stops (served without it: the
cosine threshold and the verifier pass them and no other check refuses them) and the should-hit
pairs it costs (the threshold and the verifier would serve them, it refuses them; of those, how
many no other check refuses). A check that alone stops no trap of the pairs given is one that
these pairs do not need. Every check is weighed as if all ran; where a verifier decides, a worker
runs only BEFORE_VERIFIER (workers/cache/guards.py), chosen on these figures.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from fleet.commands.pair_eval import Pair, Row, Scored, evaluate, score
from fleet.exits import Exit
from fleet.tables import format_table
from workers import BEFORE_VERIFIER, GUARD_CHECKS, guard_conflicts, guard_features


@dataclass(frozen=True)
class GuardRow:
    check: str
    traps_refused: int  # traps the threshold and verifier would serve that this check refuses
    traps_alone: int  # of those, the traps no other check refuses: served without this check
    should_hits_cost: int  # should-hit pairs the threshold and verifier would serve that it refuses
    should_hits_alone: int  # of those, the ones no other check refuses: served without this check

    @property
    def earns_its_place(self) -> bool:
        return self.traps_alone >= 1


def fired_checks(pairs: list[Pair]) -> list[tuple[str, ...]]:
    """Per pair, the checks that refuse serving a's answer to b, as the cache asks them
    (guard(query, cached text)); none for b == a, which the cache never guards."""
    return [() if pair.a == pair.b else tuple(name for name, _ in guard_conflicts(guard_features(pair.b), guard_features(pair.a)))
            for pair in pairs]


def ablate(pairs: Sequence[Pair], unguarded: Sequence[bool], fired: Sequence[tuple[str, ...]],
           checks: Sequence[str]) -> list[GuardRow]:
    """One row per check, from what is served without any guard (`unguarded`, per pair) and the
    checks that fire on each pair."""
    def count(check: str, should_hit: bool, alone: bool) -> int:
        return sum(open_ and pair.should_hit == should_hit and check in names and (not alone or len(names) == 1)
                   for pair, open_, names in zip(pairs, unguarded, fired, strict=True))

    return [GuardRow(check, count(check, False, False), count(check, False, True), count(check, True, False),
                     count(check, True, True)) for check in checks]


@dataclass(frozen=True)
class GuardTotals:
    """What the threshold and the verifier serve without any guard, and what the guards together
    take out of it."""

    traps_unguarded: int
    should_hits_unguarded: int
    traps_stopped: int
    traps_stopped_only_together: int  # by two checks or more, none of them alone
    should_hits_refused: int


def guard_totals(pairs: Sequence[Pair], unguarded: Sequence[bool], fired: Sequence[tuple[str, ...]]) -> GuardTotals:
    opened = [(pair, names) for pair, open_, names in zip(pairs, unguarded, fired, strict=True) if open_]
    traps = [names for pair, names in opened if not pair.should_hit]
    return GuardTotals(len(traps), len(opened) - len(traps), sum(bool(names) for names in traps),
                       sum(len(names) > 1 for names in traps),
                       sum(bool(names) for pair, names in opened if pair.should_hit))


@dataclass(frozen=True)
class GuardReport:
    encoder: str
    verifier: str | None
    threshold: float
    verifier_threshold: float | None
    pairs: int
    traps: int
    should_hits: int
    unreadable_pairs: int  # never served, guards or not
    unjudged_pairs: int
    totals: GuardTotals
    shipped: Row  # the guards on: what the cache serves
    rows: list[GuardRow]  # every check, as if all ran
    running: list[str]  # the checks a worker runs here (with a verifier: BEFORE_VERIFIER)


def measure_by_guard(pairs: list[Pair], scored: Scored | None = None) -> GuardReport:
    scored = scored if scored is not None else score(pairs)
    unguarded = scored.served_at_shipped(pairs, guards=False)
    fired = fired_checks(pairs)
    guarded = scored.served_at_shipped(pairs, guards=True, every_check=True)
    if guarded != [open_ and not names for open_, names in zip(unguarded, fired)]:
        raise RuntimeError("the checks read here disagree with the cache's guard: the ablation would be wrong")
    unreadable = scored.embedded.unreadable
    return GuardReport(
        scored.embedded.encoder, scored.verifier.manifest.id if scored.verifier is not None else None,
        scored.shipped_threshold, scored.verifier.threshold if scored.verifier is not None else None,
        len(pairs), sum(not p.should_hit for p in pairs), sum(p.should_hit for p in pairs),
        sum(p.a in unreadable or p.b in unreadable for p in pairs), scored.unjudged_pairs,
        guard_totals(pairs, unguarded, fired),
        evaluate(pairs, scored.embedded.vectors, scored.shipped_threshold, True, scored.verdicts,
                 scored.verifier_threshold, unreadable),
        ablate(pairs, unguarded, fired, [name for name, _ in GUARD_CHECKS]),
        [name for name, _ in GUARD_CHECKS if scored.verifier is None or name in BEFORE_VERIFIER])


def guard_table(rows: list[GuardRow], running: Sequence[str]) -> str:
    figures = ("traps it refuses", "traps it alone stops", "should-hits it costs", "of those, it alone")
    return format_table(("check", "runs here", *figures, "verdict"), [
        (row.check, "yes" if row.check in running else "no", str(row.traps_refused), str(row.traps_alone),
         str(row.should_hits_cost), str(row.should_hits_alone),
         "earns its place" if row.earns_its_place else "no trap of these pairs needs it")
        for row in rows], right=figures)


def print_by_guard(report: GuardReport) -> None:
    point = (f"cosine >= {report.threshold:.2f}, verifier P(same) >= {report.verifier_threshold:.4f}"
             if report.verifier is not None else f"cosine >= {report.threshold:.2f}, no verifier")
    print(f"encoder {report.encoder}; verifier {report.verifier or 'none (off, or none registered)'}; operating point: {point}")
    unread = (f" ({report.unreadable_pairs} with a text the encoder cannot read, {report.unjudged_pairs} with a token "
              "the verifier cannot read: never served)" if report.unreadable_pairs or report.unjudged_pairs else "")
    totals = report.totals
    print(f"{report.pairs} pairs: {report.traps} traps, {report.should_hits} should-hit{unread}")
    decides = "the threshold and the verifier serve" if report.verifier is not None else "the threshold serves"
    print(f"without any guard {decides} {totals.traps_unguarded} traps and "
          f"{totals.should_hits_unguarded} should-hit pairs; the guards stop {totals.traps_stopped} of those traps "
          f"({totals.traps_stopped_only_together} only by two checks or more) and refuse "
          f"{totals.should_hits_refused} of those should-hit pairs")
    print(f"a worker runs the checks marked 'runs here' (the rows weigh each as if all ran) and serves "
          f"{report.shipped.traps:.1%} of traps and {report.shipped.should_hit:.1%} of should-hit pairs\n")
    print(guard_table(report.rows, report.running))


def by_guard(pairs: list[Pair], as_json: bool) -> int:
    report = measure_by_guard(pairs)
    if as_json:
        print(json.dumps(asdict(report) | {
            "shipped": asdict(report.shipped) | {"meets_targets": report.shipped.meets_targets},
            "rows": [asdict(row) | {"earns_its_place": row.earns_its_place} for row in report.rows]}, indent=1))
    else:
        print_by_guard(report)
    return Exit.OK if report.shipped.meets_targets else Exit.FAILED
