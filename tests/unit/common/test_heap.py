import gc
from collections.abc import Iterator

import pytest

from common.heap import YOUNG_THRESHOLD, settle_heap


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_settle_heap_freezes_what_exists_and_spaces_young_collections(restored_gc: None) -> None:
    built_at_start = [[index] for index in range(1_000)]
    settle_heap()
    assert gc.get_freeze_count() >= len(built_at_start)
    collected = {id(o) for o in gc.get_objects()}
    assert not any(id(o) in collected for o in built_at_start)  # frozen: no collection walks them
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD


def test_settle_heap_keeps_the_older_generations_thresholds(restored_gc: None) -> None:
    _, older, oldest = gc.get_threshold()
    settle_heap(young_threshold=5_000)
    assert gc.get_threshold() == (5_000, older, oldest)
