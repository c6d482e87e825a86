from workers.batching.sizing import BatchSizeCap


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_oom_halves_the_cap_and_it_grows_back_after_clean_periods() -> None:
    clock = Clock()
    cap = BatchSizeCap(32, clean_period_s=10, clock=clock)
    assert cap.on_oom(32) == 16
    assert cap.on_oom(16) == 8
    assert cap.on_clean_batch() == 8  # not clean for long enough yet
    seen = []
    for _ in range(20):
        clock.now += 10
        seen.append(cap.on_clean_batch())
    assert seen[0] == 10 and seen == sorted(seen) and seen[-1] == 32


def test_cap_never_drops_below_one_and_never_exceeds_the_setting() -> None:
    clock = Clock()
    cap = BatchSizeCap(4, clean_period_s=1, clock=clock)
    for _ in range(5):
        cap.on_oom(1)
    assert cap.current == 1
    for _ in range(50):
        clock.now += 1
        cap.on_clean_batch()
    assert cap.current == 4


def test_oom_on_a_batch_smaller_than_the_cap_halves_that_batch() -> None:
    assert BatchSizeCap(64).on_oom(10) == 5
