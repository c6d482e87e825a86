"""The trained weights the build ships (models/build/data/trained/): intact, current, small, and
applied the same way on every machine."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from fleet_dev.train_models import MIN_COSINE_NOISE, MIN_LOGIT_NOISE
from fleet_dev.verifier_gates import MULTILINGUAL_PINNED_SETS, PINNED_SETS, PinnedSet
from models.build.faq_data import FAQ_DATA_FILE, FAQ_ZH_DATA_FILE, load_faq_dataset, load_faq_datasets
from models.build.trained import (
    RECORD_FILE,
    TRAINED_DIR,
    WEIGHTS_FILE,
    TrainedArtifactError,
    read_record,
    read_weights,
)
from models.build.multilingual_pairs import load_multilingual_dataset
from models.build.verifier_data import load_verifier_dataset

SHIPPED = ("faq-intent", "faq-intent-multilingual", "cache-verifier", "cache-verifier-multilingual")
FP32_ONLY = {"cache-verifier-multilingual"}


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_artifact_matches_its_record_and_is_small(name: str) -> None:
    record = read_record(name)
    assert record.name == name
    assert WEIGHTS_FILE in record.files
    assert set(record.graphs) == ({"fp32"} if name in FP32_ONLY else {"fp32", "int8"})
    size = sum((TRAINED_DIR / name / filename).stat().st_size for filename in record.files)
    assert size < 3_500_000, f"{name} ships {size / 1e6:.1f} MB: a few MB at most belong in git"


def test_the_shipped_artifacts_learnt_from_the_data_in_the_repository() -> None:
    """A change to the pairs or the FAQ examples (or the modules that make them) is a new data
    version: run scripts/train-models and commit what it writes."""
    assert read_record("cache-verifier").training_data == load_verifier_dataset().version
    assert read_record("cache-verifier-multilingual").training_data == load_multilingual_dataset().version
    assert read_record("faq-intent").training_data == load_faq_dataset().version
    assert read_record("faq-intent-multilingual").training_data == \
        load_faq_datasets((FAQ_DATA_FILE, FAQ_ZH_DATA_FILE)).version


@pytest.mark.parametrize(("name", "pinned_sets"), [("cache-verifier", PINNED_SETS),
                                                    ("cache-verifier-multilingual", MULTILINGUAL_PINNED_SETS)])
def test_the_shipped_verifier_met_every_pinned_target_with_a_margin(name: str,
                                                                    pinned_sets: tuple[PinnedSet, ...]) -> None:
    figures = read_record(name).figures
    assert figures["logit_noise"] >= MIN_LOGIT_NOISE and figures["cosine_noise"] >= MIN_COSINE_NOISE
    for pinned in pinned_sets:
        key = pinned.record_key
        assert figures[f"{key}.worst_traps"] <= pinned.max_traps + 1e-12, pinned.name
        assert figures[f"{key}.worst_should_hit"] >= pinned.min_should_hit, pinned.name


def test_a_damaged_artifact_is_refused_with_the_fix(tmp_path: Path) -> None:
    shutil.copytree(TRAINED_DIR / "faq-intent", tmp_path / "faq-intent")
    weights = tmp_path / "faq-intent" / WEIGHTS_FILE
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(TrainedArtifactError, match="does not match"):
        read_weights("faq-intent", tmp_path)
    (tmp_path / "faq-intent" / RECORD_FILE).unlink()
    with pytest.raises(TrainedArtifactError, match="scripts/train-models"):
        read_record("faq-intent", tmp_path)


def test_the_adapter_gives_back_what_was_trained_and_the_same_bits_every_time() -> None:
    import torch

    from models.build.source import locate_packaged_model
    from models.build.verifier_backbone import minilm_backbone
    from models.build.verifier_model import adapter_from, apply_adapter, load_classifier

    backbone = minilm_backbone(locate_packaged_model())
    trained = load_classifier(backbone.load_encoder, seed=0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        query = trained.encoder.encoder.layer[0].attention.self.query
        query.weight += 0.01 * torch.randn(384, 2, generator=generator) @ torch.randn(2, 384, generator=generator)
        query.bias += 0.001
    tensors = adapter_from(trained, backbone.load_encoder(), rank=4)
    assert {key.rsplit(".", 1)[-1] for key in tensors} == {"up", "down", "delta", "weight", "bias"}
    first, second = apply_adapter(backbone.load_encoder(), tensors), apply_adapter(backbone.load_encoder(), tensors)
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    rebuilt = first.encoder.encoder.layer[0].attention.self.query
    np.testing.assert_allclose(rebuilt.weight.detach().numpy(), query.weight.detach().numpy(), atol=1e-4)
    np.testing.assert_array_equal(rebuilt.bias.detach().numpy(), query.bias.detach().numpy())
    np.testing.assert_array_equal(first.head.weight.detach().numpy(), trained.head.weight.detach().numpy())


def test_an_adapter_for_another_model_is_refused() -> None:
    from models.build.source import locate_packaged_model
    from models.build.verifier_backbone import minilm_backbone
    from models.build.verifier_model import apply_adapter

    load = minilm_backbone(locate_packaged_model()).load_encoder
    with pytest.raises(ValueError, match="does not fit"):
        apply_adapter(load(), {"encoder.pooler.nothing.weight.delta": np.zeros((2, 2), dtype=np.float32)})
    with pytest.raises(ValueError, match="not a cache-verifier adapter"):
        apply_adapter(load(), {})
