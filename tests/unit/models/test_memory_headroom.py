import pytest

from models.backends.memory import cuda_total_bytes, memory_limit


def test_headroom_keeps_that_fraction_free() -> None:
    assert memory_limit(100 * 2**30, 0.15) == int(85 * 2**30)
    assert memory_limit(1000, 0.0) == 1000


def test_headroom_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="headroom"):
        memory_limit(1000, 1.0)


def test_no_cuda_here_means_no_limit_to_apply() -> None:
    assert cuda_total_bytes() is None
