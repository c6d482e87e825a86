"""Results-topic verdicts are remembered per topic, and stay bounded."""

import re

from workers.compute import triage
from workers.compute.triage import TriageRules


def test_a_verdict_is_the_same_remembered_or_not() -> None:
    rules = TriageRules(results_topics=re.compile(r"fleet\.results.*"))
    for _ in range(2):
        assert rules.topic_problem("fleet.results.ok") is None
        assert "outside the allowed" in (rules.topic_problem("elsewhere") or "")
        assert "fleet itself" in (rules.topic_problem("fleet.requests.minilm-embed") or "")


def test_a_flood_of_topic_names_stays_bounded(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(triage, "MAX_REMEMBERED_TOPICS", 10)
    rules = TriageRules()
    for i in range(100):
        rules.topic_problem(f"fleet.results.{i}")
    assert len(rules._verdicts) <= 10
