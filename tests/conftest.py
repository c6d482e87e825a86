"""Marks that follow from where a test lives and what it needs, so nobody has to remember them.

Everything under tests/integration/ talks to the real Kafka and Redis; a test marked `models`
loads the models `scripts/build-models` builds. Both are `integration`, so
`pytest -m "not integration"` runs with no stack and no built models.
"""

from pathlib import Path

import pytest

INTEGRATION_DIR = Path(__file__).resolve().parent / "integration"


@pytest.hookimpl(tryfirst=True)  # before pytest deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(INTEGRATION_DIR) or item.get_closest_marker("models") is not None:
            item.add_marker(pytest.mark.integration)
