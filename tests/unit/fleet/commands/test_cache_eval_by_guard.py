"""`fleet cache-eval --by-guard`: per guard check, the traps it alone stops and the should-hit
pairs it costs, counted only over what the threshold and the verifier would serve without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet.commands.pair_eval import Pair
from fleet.commands.guard_ablation import GuardRow, GuardTotals, ablate, fired_checks, guard_table, guard_totals
from tests.built_models import built_registry, resolve_or_skip


def pair(name: str, should_hit: bool) -> Pair:
    return Pair(f"{name} a", f"{name} b", "paraphrase" if should_hit else "trap", should_hit)


def test_a_check_earns_its_place_only_by_a_trap_no_other_check_stops() -> None:
    pairs = [pair("trap 1", False), pair("trap 2", False), pair("trap 3", False), pair("trap 4", False),
             pair("hit 1", True), pair("hit 2", True), pair("hit 3", True)]
    unguarded = [True, True, True, False, True, True, False]  # trap 4 and hit 3: the threshold or verifier refuse
    fired = [("numbers",), ("numbers", "negation"), (), ("negation",), ("negation",), ("numbers", "negation"),
             ("numbers",)]
    rows = ablate(pairs, unguarded, fired, ["numbers", "negation", "roles"])
    assert rows == [
        GuardRow("numbers", traps_refused=2, traps_alone=1, should_hits_cost=1, should_hits_alone=0),
        # trap 4 is never served, so negation stopping it earns nothing; hit 1 is lost to it alone
        GuardRow("negation", traps_refused=1, traps_alone=0, should_hits_cost=2, should_hits_alone=1),
        GuardRow("roles", traps_refused=0, traps_alone=0, should_hits_cost=0, should_hits_alone=0),
    ]
    assert [row.earns_its_place for row in rows] == [True, False, False]
    assert guard_totals(pairs, unguarded, fired) == GuardTotals(
        traps_unguarded=3, should_hits_unguarded=2, traps_stopped=2, traps_stopped_only_together=1,
        should_hits_refused=2)
    table = guard_table(rows, running=["numbers"])
    assert "earns its place" in table.splitlines()[2] and "no trap of these pairs needs it" in table.splitlines()[3]
    assert [line.split()[1] for line in table.splitlines()[2:]] == ["yes", "no", "no"]


def test_the_checks_are_asked_as_the_cache_asks_them() -> None:
    """guard(query, cached text): b against a; a text is never guarded against itself."""
    fired = fired_checks([Pair("Is the gym open?", "Is the gym not open?", "negation", False),
                          Pair("Call me at 7 pm", "Call me at 7 pm", "same", True)])
    assert fired == [("negation",), ()]


@pytest.mark.models
def test_by_guard_reports_one_row_per_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fleet.commands.cache_eval import main
    from workers.cache.guards import BEFORE_VERIFIER, CHECKS

    resolve_or_skip(built_registry(), "int8")
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps({
        "paraphrases": [{"a": "How do I reset my password?", "b": "How can I reset my password?"}],
        "near_misses": [{"a": "Is the gym open?", "b": "Is the gym not open?", "kind": "negation"}]}),
        encoding="utf-8")
    main(["--pairs", str(path), "--by-guard", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert [row["check"] for row in report["rows"]] == [name for name, _ in CHECKS]
    assert set(report["running"]) == BEFORE_VERIFIER, "a verifier decides: only the checks before it run"
    assert report["pairs"] == 2 and report["traps"] == 1 and report["shipped"]["traps"] == 0.0
