"""Model cards: built from the manifests the fleet builds, in Open Inference Protocol terms, and
read back tolerantly (a card of another version or garbage is None, never an exception)."""

from __future__ import annotations

import json

from models.cards import card_of
from models.registry import ModelManifest
from schemas.model_card import ModelCard, oip_datatype
from schemas.names import card_key
from tests.paths import REPO_ROOT

FAQ = ModelManifest.model_validate(
    json.loads((REPO_ROOT / "tests/unit/models/data/faq_manifest_v1.json").read_text(encoding="utf-8")))


def test_a_card_describes_a_version_in_open_inference_protocol_terms() -> None:
    card = card_of(FAQ, written_ms=5)
    assert (card.name, card.version, card.task, card.max_length) == ("faq-intent", FAQ.id, "classification", 256)
    assert [(t.name, t.datatype, t.shape) for t in card.inputs] == [
        ("input_ids", "INT64", (-1, -1)), ("attention_mask", "INT64", (-1, -1))]
    assert [(t.name, t.datatype, t.shape) for t in card.outputs] == [("probabilities", "FP32", (-1, 20))]
    assert card.labels == FAQ.labels and card.input("input_ids") is card.inputs[0] and card.input("x") is None
    assert card.inputs[0].numpy_dtype == "int64"


def test_a_card_round_trips_and_unreadable_ones_are_none() -> None:
    card = card_of(FAQ)
    assert ModelCard.decode(card.encode()) == card
    assert ModelCard.decode(b"not json") is None
    assert ModelCard.decode(card.model_copy(update={"v": 99}).encode()) is None


def test_datatypes_and_keys() -> None:
    assert (oip_datatype("float32"), oip_datatype("uint8"), oip_datatype("bool")) == ("FP32", "UINT8", "BOOL")
    assert card_key("faq-intent") == "fleet:card:faq-intent"
    assert card_key("faq-intent", FAQ.id) == f"fleet:card:faq-intent:{FAQ.id}"
