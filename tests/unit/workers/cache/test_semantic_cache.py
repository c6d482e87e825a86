"""The semantic cache: threshold, guards, bounded entries, self-measurement; and, with the real
INT8 encoder, a paraphrase hit next to a negation and a number change that miss."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import msgpack
import numpy as np
import numpy.typing as npt
import pytest

from tests.built_models import built_registry, resolve_or_skip
from workers.cache.choice import outputs_agree
from workers.cache.semantic import DEFAULT_THRESHOLD, SemanticCache, SemanticHit

DIM = 16


def unit(seed: int) -> npt.NDArray[np.float32]:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def at_cosine(v: npt.NDArray[np.float32], cosine: float, seed: int = 99) -> npt.NDArray[np.float32]:
    """A unit vector whose cosine with unit vector `v` is exactly `cosine`."""
    w = unit(seed)
    w = w - (w @ v) * v
    w /= np.linalg.norm(w)
    return (cosine * v + np.sqrt(1 - cosine**2) * w).astype(np.float32)


def rows(*vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    return np.stack(vectors)


def test_identical_and_near_vectors_above_the_threshold_hit() -> None:
    cache = SemanticCache(DIM, threshold=0.95)
    v = unit(1)
    assert cache.add(["How do I reset my password?"], rows(v), [b"answer"]) == 1
    same, near = cache.lookup(["How do I reset my password?", "how can I reset my password"],
                              rows(v, at_cosine(v, 0.96)))
    assert same is not None and same.outputs == b"answer" and same.similarity == pytest.approx(1.0, abs=1e-5)
    assert near is not None and near.similarity == pytest.approx(0.96, abs=1e-4)
    assert near.matched_text == "How do I reset my password?"
    assert (cache.hits, cache.misses) == (2, 0)


def test_below_the_threshold_misses() -> None:
    cache = SemanticCache(DIM, threshold=0.95)
    v = unit(1)
    cache.add(["How do I reset my password?"], rows(v), [b"answer"])
    assert cache.lookup(["Where is my parcel?"], rows(at_cosine(v, 0.94))) == [None]
    assert (cache.hits, cache.misses) == (0, 1)


def test_a_guard_blocks_a_close_neighbour_and_the_next_one_that_passes_answers() -> None:
    cache = SemanticCache(DIM, threshold=0.9)
    v = unit(1)
    cache.add(["How do I enable 2FA?"], rows(v), [b"enable"])
    assert cache.lookup(["How do I disable 2FA?"], rows(v)) == [None]
    assert cache.blocked == 1
    cache.add(["How can I turn off two-factor authentication?"], rows(at_cosine(v, 0.93)), [b"disable"])
    [hit] = cache.lookup(["How do I disable 2FA?"], rows(v))
    assert hit is not None and hit.outputs == b"disable"


def test_without_guards_the_threshold_alone_decides() -> None:
    cache = SemanticCache(DIM, threshold=0.9, guard=None)
    v = unit(1)
    cache.add(["How do I enable 2FA?"], rows(v), [b"enable"])
    [hit] = cache.lookup(["How do I disable 2FA?"], rows(v))
    assert hit is not None and hit.outputs == b"enable"


@pytest.mark.parametrize("hnsw_above", [1_000, 4])  # flat segments, then HNSW segments
def test_capacity_bounds_the_entries_and_evicts_the_oldest(hnsw_above: int) -> None:
    cache = SemanticCache(DIM, capacity=8, segments=4, hnsw_above=hnsw_above)
    assert cache.hnsw == (hnsw_above < 8)
    for i in range(20):
        cache.add([f"question number {i}"], rows(unit(i)), [str(i).encode()])
        assert cache.vectors <= 8 and cache.entries <= 8
    assert cache.entries >= 6  # one segment of 2 dropped at a time
    assert cache.evictions == 20 - cache.entries
    oldest, newest = cache.lookup(["question number 0", "question number 19"], rows(unit(0), unit(19)))
    assert oldest is None
    assert newest is not None and newest.outputs == b"19"


def test_a_text_is_stored_once_and_a_newer_generation_replaces_it() -> None:
    cache = SemanticCache(DIM, capacity=100)
    v = unit(3)
    assert cache.add(["Where is my order?", "Where is my order?"], rows(v, v), [b"a", b"b"]) == 1
    assert cache.add(["Where is my order?"], rows(v), [b"c"], generation=0) == 0
    assert cache.add(["Where is my order?"], rows(v), [b"d"], generation=1) == 1
    assert cache.entries == 1
    [hit] = cache.lookup(["Where is my order?"], rows(v))
    assert hit is not None and hit.outputs == b"d"
    cache.clear()
    assert cache.entries == 0 and cache.lookup(["Where is my order?"], rows(v)) == [None]


def test_wrong_vector_shapes_are_refused() -> None:
    cache = SemanticCache(DIM)
    with pytest.raises(ValueError):
        cache.lookup(["a", "b"], rows(unit(1)))
    with pytest.raises(ValueError):
        cache.add(["a"], np.zeros((1, DIM + 1), dtype=np.float32), [b"x"])


def test_the_verify_fraction_samples_hits() -> None:
    v = unit(1)
    for fraction, expected in ((1.0, True), (0.0, False)):
        cache = SemanticCache(DIM, verify_fraction=fraction)
        cache.add(["Where is my order?"], rows(v), [b"x"])
        [hit] = cache.lookup(["Where is my order?"], rows(v))
        assert hit is not None and hit.verify is expected
    cache = SemanticCache(DIM, verify_fraction=0.25, seed=7)
    cache.add(["Where is my order?"], rows(v), [b"x"])
    sampled = [hit.verify for hit in cache.lookup(["Where is my order?"] * 400, rows(*[v] * 400)) if hit]
    assert 60 <= sum(sampled) <= 140


def _hit(cache: SemanticCache) -> SemanticHit:
    v = unit(5)
    cache.add(["Where is my order?"], rows(v), [b"x"])
    [hit] = cache.lookup(["Where is my order?"], rows(v))
    assert hit is not None
    return hit


def test_agreeing_verifications_keep_the_threshold() -> None:
    cache = SemanticCache(DIM, threshold=0.95, min_verifications=10)
    for _ in range(50):
        cache.record_verification(_hit(cache), agreed=True)
    assert (cache.threshold, cache.enabled, cache.false_hit_rate, cache.verified) == (0.95, True, 0.0, 50)


def test_the_false_hit_budget_raises_the_threshold_then_switches_the_cache_off(
        caplog: pytest.LogCaptureFixture) -> None:
    cache = SemanticCache(DIM, threshold=0.95, false_hit_budget=0.01, min_verifications=10, threshold_step=0.01,
                          max_threshold=0.97)
    stale = _hit(cache)
    with caplog.at_level(logging.WARNING, logger="workers.cache.semantic"):
        for _ in range(9):
            cache.record_verification(_hit(cache), agreed=False)
        assert cache.threshold == 0.95 and cache.false_hit_rate == 1.0  # too few verifications to act on
        cache.record_verification(_hit(cache), agreed=False)
        assert cache.threshold == pytest.approx(0.96)
        assert any("threshold raised 0.950 -> 0.960" in r.getMessage() for r in caplog.records)
        for _ in range(20):
            cache.record_verification(stale, agreed=False)  # served under 0.95: says nothing about 0.96
        assert cache.threshold == pytest.approx(0.96)
        for _ in range(10):
            cache.record_verification(_hit(cache), agreed=False)
        assert cache.threshold == pytest.approx(0.97) and cache.enabled
        for _ in range(10):
            cache.record_verification(_hit(cache), agreed=False)
    assert not cache.enabled
    assert any("switched OFF" in r.getMessage() for r in caplog.records)
    assert cache.lookup(["Where is my order?"], rows(unit(5))) == [None]
    assert (cache.verified, cache.false_hits) == (50, 50)


def test_outputs_agree_by_label_or_embedding_cosine() -> None:
    assert outputs_agree({"label": "reset_password", "score": 0.9}, {"label": "reset_password", "score": 0.7})
    assert not outputs_agree({"label": "reset_password"}, {"label": "enable_2fa"})
    v = unit(1)
    assert outputs_agree({"embedding": v.tolist()}, {"embedding": at_cosine(v, 0.995).tolist()})
    assert not outputs_agree({"embedding": v.tolist()}, {"embedding": at_cosine(v, 0.98).tolist()})
    assert not outputs_agree({"embedding": v.tolist()}, {"embedding": v[:4].tolist()})


def test_concurrent_lookups_and_adds_keep_the_counts_consistent() -> None:
    cache = SemanticCache(DIM, capacity=64, segments=4)

    def work(worker: int) -> int:
        hits = 0
        for i in range(50):
            vector = rows(unit(1000 * worker + i))
            cache.add([f"question {worker} {i}"], vector, [b"x"])
            hits += cache.lookup([f"question {worker} {i}"], vector)[0] is not None
        return hits

    with ThreadPoolExecutor(4) as pool:
        hits = sum(pool.map(work, range(4)))
    assert cache.hits == hits and cache.hits + cache.misses == 200
    assert cache.vectors <= 64 and cache.evictions == 200 - cache.entries


@pytest.mark.models
def test_the_real_encoder_serves_a_paraphrase_but_not_a_negation_or_a_number_change() -> None:
    from models.backends.onnx import OnnxEmbeddingBackend

    registry = built_registry()
    encoder = OnnxEmbeddingBackend.load(registry, resolve_or_skip(registry, "int8"))
    cached = ["How do I reset my password?", "My refund has arrived", "Can I return an item after 30 days?"]
    asked = ["How can I reset my password?", "My refund has not arrived", "Can I return an item after 60 days?"]
    cache = SemanticCache(encoder.infer(["x"]).shape[1], threshold=DEFAULT_THRESHOLD)
    outputs = [msgpack.packb({"label": text}) for text in cached]
    cache.add(cached, encoder.infer(cached), outputs)
    paraphrase, negation, number = cache.lookup(asked, encoder.infer(asked))
    assert paraphrase is not None and paraphrase.outputs == outputs[0]
    assert negation is None and number is None
    assert cache.blocked == 2  # both were close enough to pass the threshold alone


@pytest.mark.models
def test_without_a_verifier_the_cosine_default_keeps_the_issue_4_targets_on_the_evaluation_pairs() -> None:
    from fleet.commands.pair_eval import evaluate, load_pairs
    from models.backends.onnx import OnnxEmbeddingBackend

    registry = built_registry()
    encoder = OnnxEmbeddingBackend.load(registry, resolve_or_skip(registry, "int8"))
    pairs = load_pairs()
    texts = list(dict.fromkeys(text for pair in pairs for text in (pair.a, pair.b)))
    vectors = dict(zip(texts, np.concatenate([encoder.infer(texts[i:i + 64]) for i in range(0, len(texts), 64)])))
    shipped = evaluate(pairs, vectors, DEFAULT_THRESHOLD, guards=True)
    assert shipped.should_hit >= 0.30 and shipped.traps <= 0.02, shipped
    assert evaluate(pairs, vectors, DEFAULT_THRESHOLD, guards=False).traps > 0.10  # the guards matter
