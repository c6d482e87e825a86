"""The built verifier on pairs it never saw: the outsider evaluation set (tests/data/
outsider_pairs.json, other domains, templates and words than the generator's) through the real
encoder, guards and verifier at the shipped operating point, and the figures its manifest records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.built_models import built_registry
from tests.paths import REPO_ROOT
from workers.cache.verifier import CacheVerifier

OUTSIDER = REPO_ROOT / "tests" / "data" / "outsider_pairs.json"
SECOND = REPO_ROOT / "tests" / "data" / "outsider_pairs_2.json"


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


# Issue 26's targets on pairs the project never trained on. Measured on cache-verifier INT8 (build of
# 2026-12-03): 0 of 115 traps, 45.7% of 70 should-hit pairs (docs/concepts/semantic-cache.md).
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


@pytest.mark.models
def test_on_the_second_outsider_set_at_most_one_trap_is_served(verifier: CacheVerifier) -> None:
    """40 traps: one served is 2.5%, over the 1% target on this set alone (fridge -> freezer, measured);
    across both outsider sets 1 of 155. A rebuild that serves more fails here."""
    from fleet.commands.cache_eval import SHIPPED_RECALL_THRESHOLD, embed_all, evaluate, load_pairs

    pairs = load_pairs(Path(SECOND))
    _, vectors = embed_all([text for pair in pairs for text in (pair.a, pair.b)])
    verdicts = verifier.score([(pair.b, pair.a) for pair in pairs]).scores
    verified = evaluate(pairs, vectors, SHIPPED_RECALL_THRESHOLD, True, verdicts, verifier.threshold)
    traps = sum(not pair.should_hit for pair in pairs)
    assert round(verified.traps * traps) <= 1, verified
    assert verified.should_hit >= OUTSIDER_MIN_SHOULD_HIT, verified
