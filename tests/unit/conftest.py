"""Unit tests see none of the shell's FLEET_* variables: what they check must not depend on which
stack, model folder or home the person running them has exported. Tests marked `models` keep
them, since FLEET_MODEL_DIR says where the built models are."""

import os

import pytest

from common.settings import ENV_PREFIX


@pytest.fixture(autouse=True)
def no_fleet_environment(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("models") is not None:
        return
    for key in [key for key in os.environ if key.upper().startswith(ENV_PREFIX)]:
        monkeypatch.delenv(key)
