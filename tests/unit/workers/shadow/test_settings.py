"""The shadow's settings: the worker's model runtime and group membership, its own shadow_*
fields, and none of the batch path's."""

import pytest
from pydantic import ValidationError

from workers.runtime_settings import ModelMemberSettings
from workers.settings import WorkerSettings
from workers.shadow.settings import ShadowSettings


def test_the_shadow_has_the_shared_fields_and_its_own_but_none_of_the_batch_paths() -> None:
    shared = set(ModelMemberSettings.model_fields)
    own = set(ShadowSettings.model_fields) - shared
    assert own == {"role"} | {name for name in ShadowSettings.model_fields if name.startswith("shadow_")}
    assert shared <= set(WorkerSettings.model_fields)
    assert not {"exact_cache", "semantic_cache", "max_queue_delay_ms", "health_probe_interval_s",
                "takeover_after_s", "fault_injection"} & set(ShadowSettings.model_fields)


def test_the_same_environment_loads_the_same_model_version_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"FLEET_MODEL": "faq-intent", "FLEET_PRECISION": "int8", "FLEET_INTRA_OP_THREADS": "2",
                        "FLEET_GRAPH_OPTIMIZATION": "basic", "FLEET_MAX_BATCH_SIZE": "8"}.items():
        monkeypatch.setenv(name, value)
    shadow, worker = ShadowSettings(), WorkerSettings()
    assert shadow.runtime() == worker.runtime()
    assert shadow.max_batch_size == worker.max_batch_size == 8


def test_a_shadow_is_only_ever_a_shadow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_ROLE", "shadow")
    assert ShadowSettings().role == "shadow"
    monkeypatch.setenv("FLEET_ROLE", "primary")
    with pytest.raises(ValidationError):
        ShadowSettings()


def test_the_simulated_device_is_refused_in_production_for_the_shadow_too() -> None:
    with pytest.raises(ValidationError, match="refused in production"):
        ShadowSettings(backend="sim", sim_preset="h200-minilm", environment="production")
