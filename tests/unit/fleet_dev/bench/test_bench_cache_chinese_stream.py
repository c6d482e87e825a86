"""The Chinese cache bench's stream: the article's mix, seeded, every paraphrase and trap of a
question asked only after the question itself."""

from __future__ import annotations

from fleet_dev.bench.cache_chinese_stream import chinese_stream, fresh_questions, load_groups


def test_the_stream_has_the_articles_mix_and_is_the_same_for_the_same_seed() -> None:
    groups, fresh = load_groups(), fresh_questions()
    assert len(groups) == 60 and all(len(g.paraphrases) == 3 and len(g.traps) == 2 for g in groups)
    stream = chinese_stream(groups, fresh, 1200, seed=7)
    shares = {kind: sum(q.kind == kind for q in stream) / len(stream) for kind in ("repeat", "paraphrase", "trap")}
    assert 0.30 <= shares["repeat"] <= 0.40 and 0.12 <= shares["paraphrase"] <= 0.18 and 0.05 <= shares["trap"] <= 0.12
    assert stream == chinese_stream(groups, fresh, 1200, seed=7)
    assert stream != chinese_stream(groups, fresh, 1200, seed=8)


def test_a_paraphrase_or_trap_comes_after_its_question_and_a_repeat_after_its_text() -> None:
    groups = load_groups()
    stream = chinese_stream(groups, fresh_questions(), 800, seed=3)
    question_of = {text: g.question for g in groups for text in (*g.paraphrases, *g.traps)}
    seen: set[str] = set()
    for query in stream:
        if query.kind in ("paraphrase", "trap"):
            assert question_of[query.text] in seen
        if query.kind == "repeat":
            assert query.text in seen
        seen.add(query.text)
    assert len({q.text for q in stream if q.kind in ("paraphrase", "trap")}) == \
        sum(q.kind in ("paraphrase", "trap") for q in stream), "each paraphrase and trap is drawn once"
