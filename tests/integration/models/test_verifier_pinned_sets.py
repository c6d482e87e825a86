"""The built verifier on pairs people wrote, through the real encoder, guards and verifier at the
shipped operating point, and the figures its manifest records.

Every pinned set (fleet_dev/verifier_gates.py) is held to its target here, on this machine's
build. The maintainer's `scripts/train-models` wrote the shipped adapter only when every set met its
target with a margin bigger than the score noise between machines, so no CPU's rounding can flip
these. The honest sets (tests/data/outsider_pairs_{5,6,7}.json) are in no training or calibration,
nor is any pair near one of their texts (models/build/written_pairs.py)."""

from __future__ import annotations

import numpy as np
import pytest

from fleet_dev.verifier_gates import MULTILINGUAL_PINNED_SETS, PINNED_SETS, Noise, PinnedSet, standing
from tests.built_models import built_registry
from workers.cache.verifier import CacheVerifier


@pytest.fixture(scope="module")
def verifier() -> CacheVerifier:
    found = CacheVerifier.newest(built_registry())
    if found is None:
        pytest.skip("no cache-verifier built; run scripts/build-models")
    return found


@pytest.mark.models
def test_the_manifest_records_a_calibrated_operating_point(verifier: CacheVerifier) -> None:
    figures = verifier.manifest.check.figures
    assert verifier.manifest.precision == "int8" and verifier.manifest.check.passed
    assert figures["heldout_false_hits"] <= figures["max_false_hits"]
    assert figures["heldout_should_hit"] >= 0.40
    assert 0 < verifier.threshold == figures["operating_threshold"] <= 1


@pytest.mark.models
@pytest.mark.parametrize("pinned", PINNED_SETS, ids=[pinned.name for pinned in PINNED_SETS])
def test_each_pinned_set_meets_its_target_at_the_shipped_operating_point(verifier: CacheVerifier,
                                                                          pinned: PinnedSet) -> None:
    from fleet.commands.pair_eval import embed_all

    pairs = pinned.pairs()
    vectors = embed_all([text for pair in pairs for text in (pair.a, pair.b)]).vectors
    verdicts = verifier.score([(pair.b, pair.a) for pair in pairs]).scores
    result = standing(pinned, pairs, vectors, verdicts, verifier.threshold, Noise(logit=0.0, cosine=0.0))
    assert result.meets_target, result


def test_the_pinned_sets_are_the_ones_the_targets_were_written_for() -> None:
    sizes = {pinned.name: (sum(p.should_hit for p in pinned.pairs()), sum(not p.should_hit for p in pinned.pairs()))
             for pinned in PINNED_SETS}
    assert sizes["honest sets 5-7"] == (271, 228)
    assert sizes["set 40"] == (120, 180)
    assert sizes["known gap: sets 32-33"] == (180, 260)
    assert sizes["faq-intent neighbours"][1] >= 30


@pytest.mark.models
def test_a_model_that_is_not_a_calibrated_verifier_is_refused(verifier: CacheVerifier) -> None:
    registry = built_registry()
    classifier = registry.resolve("faq-intent", precision="int8")
    with pytest.raises(ValueError, match="not a calibrated cache verifier"):
        CacheVerifier(classifier, registry)


@pytest.mark.models
def test_a_score_does_not_depend_on_its_batch_mates(verifier: CacheVerifier) -> None:
    pairs = [("Is the pool open on Sunday?", "Is the pool closed on Sunday?"),
             ("How do I reset my password?", "How can I reset my password?"),
             ("Can I bring my dog on the train to Edinburgh tomorrow morning?", "Are pets allowed on trains?")] * 30
    together = verifier.score(pairs).scores
    alone = np.concatenate([verifier.score([pair]).scores for pair in pairs[:3]])
    assert together.shape == (90,)
    # Static INT8 (models/build/quantize.py): every scale is fixed, so padding and batch-mates change
    # nothing; dynamic quantisation moved a score by up to 0.5 with them.
    np.testing.assert_allclose(together[:3], alone, rtol=0, atol=1e-6)
    assert together[0] < verifier.threshold <= together[1]


@pytest.mark.models
def test_a_pair_the_verifier_cannot_read_is_not_judged_but_counted(verifier: CacheVerifier) -> None:
    verdicts = verifier.score([("今天天气怎么样", "今天天气如何"), ("how do I reset my password", "I forgot my password"),
                               ("明天天气怎么样", "明天天气怎么样")])
    assert verdicts.unreadable == 1, "the Chinese pair is unread; the same text twice needs no judge"
    assert verdicts.scores[0] == 0.0 and verdicts.scores[2] == 1.0
    assert verdicts.scores[1] > 0.0


@pytest.fixture(scope="module")
def multilingual_verifier() -> CacheVerifier:
    found = CacheVerifier.newest(built_registry(), name="cache-verifier-multilingual")
    if found is None:
        pytest.skip("no cache-verifier-multilingual built; run scripts/build-models")
    return found


@pytest.mark.models
@pytest.mark.parametrize("pinned", MULTILINGUAL_PINNED_SETS, ids=[pinned.name for pinned in MULTILINGUAL_PINNED_SETS])
def test_the_multilingual_verifier_meets_each_target_with_e5_embed(multilingual_verifier: CacheVerifier,
                                                                     pinned: PinnedSet) -> None:
    from fleet.commands.pair_eval import embed_all

    pairs = pinned.pairs()
    vectors = embed_all([text for pair in pairs for text in (pair.a, pair.b)], encoder_model="e5-embed").vectors
    verdicts = multilingual_verifier.score([(pair.b, pair.a) for pair in pairs]).scores
    result = standing(pinned, pairs, vectors, verdicts, multilingual_verifier.threshold, Noise(logit=0.0, cosine=0.0))
    assert result.meets_target, result


@pytest.mark.models
def test_the_multilingual_verifier_reads_the_articles_pair_and_its_trap(multilingual_verifier: CacheVerifier) -> None:
    figures = multilingual_verifier.manifest.check.figures
    assert figures["heldout_false_hits_zh"] <= figures["max_false_hits"]
    assert figures["heldout_false_hits_en"] <= figures["max_false_hits"]
    verdicts = multilingual_verifier.score([("今天天气如何", "今天天气怎么样"), ("明天天气怎么样", "今天天气怎么样"),
                                            ("今天不可以退款吗", "今天可以退款吗")])
    assert verdicts.unreadable == 0
    assert verdicts.scores[0] >= multilingual_verifier.threshold > max(verdicts.scores[1], verdicts.scores[2])


@pytest.mark.models
def test_the_multilingual_verifier_refuses_unrelated_questions_its_encoder_puts_close(
        multilingual_verifier: CacheVerifier) -> None:
    """e5-embed puts any two questions above the recall threshold, so unrelated ones reach the verifier:
    questions of different pairs of the Chinese holdout and of an English honest set, alone and mixed."""
    import random

    from fleet.commands.pair_eval import SHIPPED_RECALL_THRESHOLD, embed_all, load_pairs
    from fleet_dev.verifier_gates import CHINESE_PAIRS, HONEST_SETS

    chinese = sorted({p.a for p in load_pairs(CHINESE_PAIRS) if p.split == "holdout"})
    english = sorted({p.a for p in load_pairs(HONEST_SETS / "outsider_pairs_5.json")})
    rng = random.Random(7)
    pairs = [(rng.choice(left), rng.choice(right)) for left, right in ((chinese, chinese), (english, english),
                                                                      (chinese, english)) for _ in range(100)]
    pairs = [(a, b) for a, b in pairs if a != b]
    vectors = embed_all([text for pair in pairs for text in pair], encoder_model="e5-embed").vectors
    recalled = [float(vectors[a] @ vectors[b]) >= SHIPPED_RECALL_THRESHOLD for a, b in pairs]
    served = multilingual_verifier.score(pairs).scores >= multilingual_verifier.threshold
    assert np.mean(recalled) > 0.9, "the encoder alone would let them in"
    assert np.mean(served) <= 0.01, [pair for pair, hit in zip(pairs, served) if hit][:5]
