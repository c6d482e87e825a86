import pytest

from workers.batching.policy import IDLE_POLL_MS, BatchPolicy, BatchView
from workers.settings import BatchPolicyName

ADAPTIVE = BatchPolicy(32, 20, BatchPolicyName.adaptive)
FIXED = BatchPolicy(32, 20, BatchPolicyName.fixed)


@pytest.mark.parametrize("policy", [ADAPTIVE, FIXED])
def test_a_full_batch_goes_at_once(policy: BatchPolicy) -> None:
    assert policy.decide(BatchView(in_hand=32, backlog=5000, oldest_age_ms=0)).dispatch


@pytest.mark.parametrize("policy", [ADAPTIVE, FIXED])
def test_never_waits_past_max_delay_from_the_oldest_record(policy: BatchPolicy) -> None:
    assert policy.decide(BatchView(in_hand=3, backlog=100, oldest_age_ms=20)).dispatch
    assert policy.decide(BatchView(in_hand=3, backlog=100, oldest_age_ms=250)).dispatch  # time in the topic counts
    waiting = policy.decide(BatchView(in_hand=3, backlog=100, oldest_age_ms=15))
    assert not waiting.dispatch and waiting.wait_ms == pytest.approx(5)


def test_under_backlog_adaptive_keeps_fetching_toward_a_full_batch() -> None:
    decision = ADAPTIVE.decide(BatchView(in_hand=10, backlog=500, oldest_age_ms=1))
    assert not decision.dispatch and 0 < decision.wait_ms <= 20


def test_a_lone_request_goes_at_once_when_adaptive() -> None:
    assert ADAPTIVE.decide(BatchView(in_hand=1, backlog=0, oldest_age_ms=0)).dispatch


def test_a_lone_request_waits_at_most_max_delay_when_fixed() -> None:
    decision = FIXED.decide(BatchView(in_hand=1, backlog=0, oldest_age_ms=2))
    assert not decision.dispatch and decision.wait_ms == pytest.approx(18)
    assert FIXED.decide(BatchView(in_hand=1, backlog=0, oldest_age_ms=20.1)).dispatch


def test_nothing_in_hand_polls_idle() -> None:
    decision = ADAPTIVE.decide(BatchView(in_hand=0, backlog=0, oldest_age_ms=0))
    assert not decision.dispatch and decision.wait_ms == IDLE_POLL_MS


def test_preferred_sizes_go_at_once() -> None:
    policy = BatchPolicy(32, 50, BatchPolicyName.fixed, preferred_batch_sizes=[8, 16, 64])
    assert policy.decide(BatchView(in_hand=16, backlog=100, oldest_age_ms=0)).dispatch
    assert not policy.decide(BatchView(in_hand=12, backlog=100, oldest_age_ms=0)).dispatch
    assert policy.preferred == {8, 16}  # sizes over the cap are ignored


def test_adaptive_keeps_collecting_while_the_model_is_busy() -> None:
    busy = ADAPTIVE.decide(BatchView(in_hand=5, backlog=0, oldest_age_ms=3, model_busy=True))
    assert not busy.dispatch and 0 < busy.wait_ms <= 17
    assert ADAPTIVE.decide(BatchView(in_hand=5, backlog=0, oldest_age_ms=3, model_busy=False)).dispatch
    # Past the delay it still waits for a busy model: dispatching would only queue behind it.
    assert not ADAPTIVE.decide(BatchView(in_hand=5, backlog=0, oldest_age_ms=25, model_busy=True)).dispatch
    assert ADAPTIVE.decide(BatchView(in_hand=32, backlog=0, oldest_age_ms=1, model_busy=True)).dispatch


def test_adaptive_fills_a_batch_up_to_the_delay_while_the_model_runs_one_and_has_room_for_it() -> None:
    working = ADAPTIVE.decide(BatchView(in_hand=5, backlog=0, oldest_age_ms=3, model_working=True))
    assert not working.dispatch and working.wait_ms == pytest.approx(17) and not working.until_model_has_room
    assert ADAPTIVE.decide(BatchView(in_hand=5, backlog=0, oldest_age_ms=20.5, model_working=True)).dispatch
