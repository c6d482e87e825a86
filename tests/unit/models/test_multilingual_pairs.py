"""The multilingual verifier's pairs: the Chinese written sets join the English ones, the threshold
is calibrated on Chinese pairs it never trains on, and the texts that judge it are in neither."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from fleet_dev.intent_negatives import training_texts
from models.build.intent_negatives import COUNTS, KIND, MIN_COSINE, MINED_FILE, other_intent_pairs
from models.build import multilingual_pairs
from models.build.multilingual_pairs import (
    CHINESE_PROJECT_PAIRS,
    NEAR_BIGRAM_COSINE,
    bigram_rows,
    chinese_honest_texts,
    chinese_sets,
    decontaminate,
    load_multilingual_dataset,
)
from models.build.verifier_calibration import language_of
from models.build.verifier_data import load_verifier_dataset
from models.build.written_pairs import pair_texts
from models.same_question import normal_form


def test_the_chinese_sets_are_large_and_hold_every_trap_kind() -> None:
    train, calibration = chinese_sets("train"), chinese_sets("calibration")
    assert len(train) == 5 and len(calibration) == 1
    pairs = [pair for path in train for key in ("paraphrases", "near_misses")
             for pair in json.loads(path.read_text(encoding="utf-8"))[key]]
    kinds = Counter(pair["kind"] for pair in pairs)
    assert kinds["paraphrase"] >= 500 and sum(kinds.values()) - kinds["paraphrase"] >= 800
    assert {"negation", "entity", "number", "time", "opposite"} <= set(kinds)
    assert all(language_of_text(pair["a"]) == "zh" for pair in pairs)


def language_of_text(text: str) -> str:
    return language_of(type("Pair", (), {"a": text, "b": "", "should_hit": True})())


def test_no_written_chinese_text_is_near_a_text_that_judges_the_verifier() -> None:
    honest = chinese_honest_texts()
    assert len(honest) >= 400
    honest_rows = bigram_rows(list(dict.fromkeys(honest)))
    for path in (*chinese_sets("train"), *chinese_sets("calibration")):
        texts = list(dict.fromkeys(pair_texts(json.loads(path.read_text(encoding="utf-8")))))
        nearest = (bigram_rows(texts) @ honest_rows.T).max(axis=1)
        assert float(nearest.max()) < NEAR_BIGRAM_COSINE, (path.name, texts[int(nearest.argmax())])


def test_a_near_copy_is_removed_in_any_script() -> None:
    data = {"paraphrases": [{"a": "如何申请退款？", "b": "退款怎么申请", "kind": "paraphrase"},
                            {"a": "运费谁出", "b": "运费由谁承担", "kind": "paraphrase"}],
            "near_misses": []}
    clean, removed = decontaminate(data, ["如何申请退款"])
    assert removed == 1 and [p["a"] for p in clean["paraphrases"]] == ["运费谁出"]
    rows = bigram_rows(["怎么申请退款", "如何申请退款", "怎么申请退款"])
    assert float(rows[0] @ rows[2]) > 0.999 and float(rows[0] @ rows[1]) < NEAR_BIGRAM_COSINE


def test_the_dataset_holds_both_languages_and_the_chinese_holdout_in_neither_part() -> None:
    dataset, english = load_multilingual_dataset(), load_verifier_dataset()
    assert dataset.version.startswith("verifier-pairs-multilingual-v1 sha256:")
    train_languages = Counter(language_of(pair) for pair in dataset.train if pair.kind not in ("unrelated", KIND))
    held_languages = Counter(language_of(pair) for pair in dataset.heldout)
    assert train_languages["en"] == len(english.train) and train_languages["zh"] >= 1400
    assert held_languages["en"] == len(english.heldout) and held_languages["zh"] >= 300
    holdout = json.loads(CHINESE_PROJECT_PAIRS.read_text(encoding="utf-8"))
    judged = {normal_form(text) for key in ("paraphrases", "near_misses") for pair in holdout[key]
              if pair.get("split") == "holdout" for text in (pair["a"], pair["b"])}
    used = {normal_form(text) for pair in (*dataset.train, *dataset.heldout) for text in (pair.a, pair.b)}
    assert not judged & used
    trained = {(pair.a, pair.b) for pair in dataset.train}
    assert not any((pair.a, pair.b) in trained or (pair.b, pair.a) in trained for pair in dataset.heldout)



def test_unrelated_pairs_are_far_apart_of_both_languages_and_the_same_every_time() -> None:
    from models.build.multilingual_pairs import UNRELATED_BIGRAM_COSINE, UNRELATED_TRAIN, unrelated_pairs

    dataset = load_multilingual_dataset()
    unrelated = [pair for pair in dataset.train if pair.kind == "unrelated"]
    assert len(unrelated) == sum(UNRELATED_TRAIN) and not any(pair.should_hit for pair in unrelated)
    assert not any(pair.kind == "unrelated" for pair in dataset.heldout), "easy traps would dilute calibration"
    mixed = [pair for pair in unrelated if language_of_text(pair.a) != language_of_text(pair.b)]
    assert len(mixed) == UNRELATED_TRAIN[2]
    rows = bigram_rows([text for pair in unrelated for text in (pair.a, pair.b)])
    assert all(float(rows[2 * i] @ rows[2 * i + 1]) <= UNRELATED_BIGRAM_COSINE for i in range(len(unrelated)))
    chinese = [pair for pair in dataset.train if pair.kind not in ("unrelated", KIND) and language_of_text(pair.a) == "zh"]
    assert unrelated_pairs(chinese, load_verifier_dataset().train, UNRELATED_TRAIN, "train") == unrelated


def test_other_intent_pairs_join_close_questions_the_classifier_answers_apart_and_nothing_else() -> None:
    texts = ["退款多久到账", "退货要寄到哪里", "退款进度怎么查", "今天天气怎么样", "发票怎么开"]
    angle = np.radians([0, 20, 5, 24, 80])
    vectors = np.stack([np.cos(angle), np.sin(angle)], axis=1).astype(np.float32)
    probabilities = np.array([[0.90, 0.05, 0.05],   # refund
                              [0.04, 0.90, 0.06],   # return: close to 0 (cos 0.94), another intent
                              [0.85, 0.08, 0.07],   # refund again: the same intent as 0, a trap with 1 (its nearest)
                              [0.40, 0.35, 0.25],   # off-domain: spread thin, in no pair
                              [0.05, 0.05, 0.90]],  # invoice: another intent but far (cos < MIN_COSINE)
                             dtype=np.float32)
    pairs = other_intent_pairs(texts, vectors, probabilities, ["refund", "return", "invoice"], count=10)
    assert [(p.a, p.b, p.intents) for p in pairs] == [("退款多久到账", "退货要寄到哪里", ("refund", "return")),
                                                      ("退货要寄到哪里", "退款进度怎么查", ("return", "refund"))]
    assert all(p.cosine >= MIN_COSINE for p in pairs)
    assert len(other_intent_pairs(texts, vectors, probabilities, ["refund", "return", "invoice"], count=1)) == 1


def test_the_mined_other_intent_pairs_are_training_texts_and_only_train() -> None:
    mined = json.loads(MINED_FILE.read_text(encoding="utf-8"))
    pairs = mined["near_misses"]
    assert Counter(pair["language"] for pair in pairs) == Counter(COUNTS)
    texts = training_texts()
    known = {text for language in texts.values() for text in language}
    assert all(pair["a"] in known and pair["b"] in known for pair in pairs)
    assert all(pair["intents"][0] != pair["intents"][1] and pair["cosine"] >= MIN_COSINE for pair in pairs)
    dataset = load_multilingual_dataset()
    assert sum(pair.kind == KIND for pair in dataset.train) == len(pairs)
    assert not any(pair.kind == KIND for pair in dataset.heldout)



def test_adding_a_written_set_keeps_it_away_from_the_texts_that_judge_the_verifier(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    judged = chinese_honest_texts()[0]
    written = tmp_path / "zh-set-9.json"
    written.write_text(json.dumps({"about": "test", "paraphrases": [{"a": judged, "b": "随便一句话"},
                                                                    {"a": "发票怎么开", "b": "怎么开发票"}],
                                   "near_misses": [{"a": "发票怎么开", "b": "发票怎么作废", "kind": "opposite"}]},
                                  ensure_ascii=False), encoding="utf-8")
    monkeypatch.setattr(multilingual_pairs, "CHINESE_DIR", tmp_path / "zh")
    assert multilingual_pairs.main([str(written), "--into", "train"]) == 0
    kept = json.loads((tmp_path / "zh" / "train" / written.name).read_text(encoding="utf-8"))
    assert [p["a"] for p in kept["paraphrases"]] == ["发票怎么开"] and len(kept["near_misses"]) == 1
    assert "1 should-hit and 1 traps kept, 1 removed" in capsys.readouterr().out
