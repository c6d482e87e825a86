"""The built verifier on pairs people wrote, through the real encoder, guards and verifier at the
shipped operating point, and the figures its manifest records. The honest sets
(tests/data/outsider_pairs_{5,6,7}.json) are in no training or calibration, nor is any pair near one
of their texts (models/build/written_pairs.py); sets 1-4 and 8-27 are (models/build/data/written_pairs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.built_models import built_registry
from tests.paths import REPO_ROOT
from workers.cache.verifier import CacheVerifier

TRAINED = REPO_ROOT / "models" / "build" / "data" / "written_pairs" / "train"
OUTSIDER = TRAINED / "outsider_pairs.json"
HONEST = REPO_ROOT / "tests" / "data"


@pytest.fixture(scope="module")
def verifier() -> CacheVerifier:
    found = CacheVerifier.newest(built_registry())
    if found is None:
        pytest.skip("no cache-verifier built; run scripts/build-models")
    return found


@pytest.mark.models
def test_the_manifest_records_a_calibrated_operating_point(verifier: CacheVerifier) -> None:
    figures = verifier.manifest.check.figures
    assert verifier.manifest.check.passed
    assert figures["heldout_false_hits"] <= figures["max_false_hits"]
    assert figures["heldout_should_hit"] >= 0.40
    assert 0 < verifier.threshold == figures["operating_threshold"] <= 1


@pytest.mark.models
def test_on_the_outsider_set_the_shipped_operating_point_meets_the_targets(verifier: CacheVerifier) -> None:
    from fleet.commands.cache_eval import SHIPPED_RECALL_THRESHOLD, embed_all, evaluate, load_pairs

    pairs = load_pairs(Path(OUTSIDER))
    _, vectors = embed_all([text for pair in pairs for text in (pair.a, pair.b)])
    verdicts = verifier.score([(pair.b, pair.a) for pair in pairs]).scores
    verified = evaluate(pairs, vectors, SHIPPED_RECALL_THRESHOLD, True, verdicts, verifier.threshold)
    cosine_only = evaluate(pairs, vectors, 0.90, True)
    assert cosine_only.traps > 0.15  # the set is hard: the old default serves many of its traps
    assert verified.traps <= OUTSIDER_MAX_TRAPS, verified
    assert verified.should_hit >= OUTSIDER_MIN_SHOULD_HIT, verified


# Issue 26's targets (docs/concepts/semantic-cache.md has the measured figures).
OUTSIDER_MAX_TRAPS = 0.01
OUTSIDER_MIN_SHOULD_HIT = 0.40


@pytest.mark.models
def test_a_model_that_is_not_a_calibrated_verifier_is_refused(verifier: CacheVerifier) -> None:
    registry = built_registry()
    classifier = registry.resolve("faq-intent", precision="int8")
    with pytest.raises(ValueError, match="not a calibrated cache verifier"):
        CacheVerifier(classifier, registry)


@pytest.mark.models
def test_scores_are_batched_and_nearly_free_of_batch_mates(verifier: CacheVerifier) -> None:
    pairs = [("Is the pool open on Sunday?", "Is the pool closed on Sunday?"),
             ("How do I reset my password?", "How can I reset my password?")] * 40
    together = verifier.score(pairs).scores
    alone = np.concatenate([verifier.score([pair]).scores for pair in pairs[:2]])
    assert together.shape == (80,)
    # INT8 dynamic quantisation picks one activation scale per batch: batch-mates move a score by
    # under 0.01 (measured 0.006), as they did when the build calibrated it in batches of 64.
    np.testing.assert_allclose(together[:2], alone, atol=0.02)
    assert together[0] < verifier.threshold <= together[1]


def _shipped_point(verifier: CacheVerifier, pairs_file: Path) -> tuple[int, int, int, int]:
    """(should-hit served, should-hit pairs, traps served, traps) of one set at the shipped point."""
    from fleet.commands.cache_eval import SHIPPED_RECALL_THRESHOLD, embed_all, load_pairs, served

    pairs = load_pairs(pairs_file)
    _, vectors = embed_all([text for pair in pairs for text in (pair.a, pair.b)])
    verdicts = verifier.score([(pair.b, pair.a) for pair in pairs]).scores
    hits = served(pairs, vectors, SHIPPED_RECALL_THRESHOLD, True, verdicts, verifier.threshold)
    return (sum(hit for hit, pair in zip(hits, pairs) if pair.should_hit), sum(pair.should_hit for pair in pairs),
            sum(hit for hit, pair in zip(hits, pairs) if not pair.should_hit), sum(not pair.should_hit for pair in pairs))


@pytest.mark.models
def test_on_the_written_sets_the_pooled_figures_meet_the_targets(verifier: CacheVerifier) -> None:
    """Sets 1-3 are trained on (wording no template has); sets 2 and 3 served fridge -> freezer and a
    Chrome/Firefox role swap until the related-entities guard. Not none: the build with constraints.txt's
    libraries serves one topic trap of set 1 ("What time does the farmers market open?" / "Where is the
    farmers market?"), the build before it none."""
    figures = [_shipped_point(verifier, TRAINED / name) for name in
               ("outsider_pairs.json", "outsider_pairs_2.json", "outsider_pairs_3.json")]
    hits, should_hit, traps, trap_pairs = (sum(column) for column in zip(*figures))
    assert traps / trap_pairs <= OUTSIDER_MAX_TRAPS, figures
    assert hits / should_hit >= OUTSIDER_MIN_SHOULD_HIT, figures


@pytest.mark.models
def test_on_the_sets_kept_out_of_training_and_calibration_the_targets_are_met(verifier: CacheVerifier) -> None:
    """Sets 5-7 (271 should-hit pairs, 228 traps; set 7 in customers' own words) were written by people
    who read neither the code nor the other sets, and nothing was trained or calibrated on them."""
    figures = [_shipped_point(verifier, HONEST / f"outsider_pairs_{n}.json") for n in (5, 6, 7)]
    hits, should_hit, traps, trap_pairs = (sum(column) for column in zip(*figures))
    assert (should_hit, trap_pairs) == (271, 228)
    assert traps / trap_pairs <= OUTSIDER_MAX_TRAPS, figures
    assert hits / should_hit >= OUTSIDER_MIN_SHOULD_HIT, figures


@pytest.mark.models
def test_a_set_written_blind_after_the_build_meets_the_targets(verifier: CacheVerifier) -> None:
    """Set 40 (120 should-hit pairs, 180 traps: 30 each of negation, antonym, entity, number, date and
    scope, 18 of the negations without a negation word) was written after this build by a writer who read
    no code and no other set. Measured once: 68.3% / 0.0%. 70 of its 300 pairs have a text within cosine
    0.90 of a written training or calibration text: it was not decontaminated against, unlike sets 5-7."""
    hits, should_hit, traps, trap_pairs = _shipped_point(verifier, HONEST / "outsider_pairs_40.json")
    assert (should_hit, trap_pairs) == (120, 180)
    assert traps / trap_pairs <= OUTSIDER_MAX_TRAPS
    assert hits / should_hit >= OUTSIDER_MIN_SHOULD_HIT


@pytest.mark.models
def test_neighbouring_faq_intents_worded_apart_are_not_served(verifier: CacheVerifier) -> None:
    """The faq-intent test split's questions against their nearest questions (tests/data/faq_test_neighbours.json):
    another intent worded apart ("turn on login verification codes" / "I want to stop getting verification
    codes when I log in") was served 3 times in 34 before the faq-intent pairs joined the training."""
    hits, should_hit, traps, trap_pairs = _shipped_point(verifier, HONEST / "faq_test_neighbours.json")
    assert trap_pairs >= 30 and traps == 0
    assert hits / should_hit >= 0.25


@pytest.mark.models
def test_same_object_other_task_traps_are_the_known_gap_and_must_not_widen(verifier: CacheVerifier) -> None:
    """Sets 32-33 (tests/data/outsider_pairs_{32,33}.json): another task or fact about the same object
    ("how long does it take to pay out a claim" / "how much of the claim will actually be paid out"), or
    who does what to whom reversed. The shipped point serves 24 of their 260 traps (9.2%; 18 with the
    libraries before constraints.txt): a known gap, not a target (docs/concepts/semantic-cache.md). This
    bound keeps a change from widening it unseen."""
    figures = [_shipped_point(verifier, HONEST / f"outsider_pairs_{n}.json") for n in (32, 33)]
    hits, should_hit, traps, trap_pairs = (sum(column) for column in zip(*figures))
    assert (should_hit, trap_pairs) == (180, 260)
    assert traps / trap_pairs <= 0.12, figures
