from workers.cache.lookup_cost import LookupCost


def test_a_model_barely_dearer_than_the_encoder_stops_lookups_at_once() -> None:
    # Even a 100% hit rate would save 0.5 ms a row against 0.6 ms of encoder: never pays.
    cost = LookupCost(probe_every=10)
    assert cost.should_look_up()
    cost.record_model(rows=32, inference_ms=32 * 0.5)
    cost.record_lookup(rows=32, hits=0, encoder_ms=32 * 0.6)
    assert not cost.paying
    assert sum(cost.should_look_up() for _ in range(100)) == 10


def test_a_dear_model_is_looked_up_until_measured_hits_stop_paying() -> None:
    cost = LookupCost(probe_every=10, alpha=0.5, warmup_rows=32)
    cost.record_model(rows=32, inference_ms=32 * 5.0)  # ten times the encoder
    cost.record_lookup(rows=32, hits=16, encoder_ms=32 * 0.5)  # 50% hits: pays
    assert cost.paying and all(cost.should_look_up() for _ in range(20))
    for _ in range(6):
        cost.record_lookup(rows=32, hits=1, encoder_ms=32 * 0.5)  # hits dried up: ~3% x 5 ms < 0.5 ms
    assert not cost.paying


def test_lookups_resume_when_probes_find_enough_hits() -> None:
    cost = LookupCost(probe_every=2, alpha=1.0, warmup_rows=0)
    cost.record_model(rows=10, inference_ms=10.0)
    cost.record_lookup(rows=10, hits=1, encoder_ms=5.0)
    assert not cost.paying
    cost.record_lookup(rows=10, hits=9, encoder_ms=5.0)
    assert cost.paying


def test_the_model_cost_a_hit_saves_is_the_marginal_row_not_the_average() -> None:
    cost = LookupCost(alpha=0.1)
    for rows in (32, 16, 8, 32, 16, 8):
        cost.record_model(rows=rows, inference_ms=15.0 + 0.5 * rows)  # 15 ms a run + 0.5 ms a row
    marginal = cost.model_ms_per_row.value
    assert marginal is not None and abs(marginal - 0.5) < 1e-6


def test_a_dear_model_keeps_looking_up_while_its_cache_warms() -> None:
    # An empty cache finds nothing at first; switching off then would keep it empty for good.
    cost = LookupCost(probe_every=10, warmup_rows=320)
    cost.record_model(rows=32, inference_ms=32 * 5.0)
    for _ in range(9):  # 288 rows, no hits yet
        cost.record_lookup(rows=32, hits=0, encoder_ms=32 * 0.5)
    assert cost.paying and cost.hit_rate.value == 0.4  # the cold hit rate: 40% x 5 ms pays for 0.5 ms
    cost.record_lookup(rows=32, hits=0, encoder_ms=32 * 0.5)  # 320 rows: the measured rate (0%) counts
    assert not cost.paying


def test_probes_that_find_many_hits_switch_lookups_on_before_the_warm_up_ends() -> None:
    # The bench's dear model: off while cold (40% x 1 ms < 0.3 ms of encoder + 0.25 ms of verifier)
    # until its probes find 80% hits. The cold rate is a floor, never a cap on what was measured.
    cost = LookupCost(probe_every=10, alpha=0.5, warmup_rows=2000)
    cost.record_model(rows=32, inference_ms=32 * 1.0)
    cost.record_lookup(rows=32, hits=0, encoder_ms=32 * 0.3, candidates=8, verifier_ms=8 * 1.0)
    assert not cost.paying and cost.hit_rate.value == 0.4
    for _ in range(4):
        cost.record_lookup(rows=32, hits=28, encoder_ms=32 * 0.3, candidates=32, verifier_ms=32 * 0.2)
    assert cost.hit_rate.rows_seen < 2000 and cost.hit_rate.value > 0.8
    assert cost.paying


def test_a_warm_cache_with_enough_hits_keeps_paying() -> None:
    cost = LookupCost(warmup_rows=64)
    cost.record_model(rows=32, inference_ms=32 * 5.0)
    for hits in (0, 2, 6, 8, 8, 8, 8, 8):  # 25% hits x 5 ms = 1.25 ms saved > 0.5 ms of encoder
        cost.record_lookup(rows=32, hits=hits, encoder_ms=32 * 0.5)
    assert cost.paying
    saved, spent = cost.saved_ms_per_row, cost.cost_ms_per_row
    assert saved is not None and spent is not None and saved > spent


def test_the_hit_rate_weighs_batches_by_their_rows() -> None:
    cost = LookupCost(alpha=0.5, warmup_rows=0)
    cost.record_lookup(rows=32, hits=16, encoder_ms=16.0)
    cost.record_lookup(rows=1, hits=0, encoder_ms=0.5)  # one row is one row of evidence, not a batch
    assert abs(cost.hit_rate.value - 8 / 17) < 1e-9


def test_the_verifier_counts_per_candidate_in_the_cost_of_a_lookup() -> None:
    cost = LookupCost(alpha=1.0, warmup_rows=0)
    cost.record_model(rows=32, inference_ms=32 * 2.0)
    # 50% hits x 2 ms = 1 ms saved; encoder 0.5 ms + 2 candidates a row x 0.4 ms = 1.3 ms spent
    cost.record_lookup(rows=32, hits=16, encoder_ms=32 * 0.5, candidates=64, verifier_ms=64 * 0.4)
    assert abs(cost.verifier_ms_per_row - 0.8) < 1e-9
    assert not cost.paying


def test_a_model_three_times_the_encoder_stops_at_once_while_its_cache_is_cold() -> None:
    # faq-intent's case: a hit would save 1.5 ms, a lookup costs 0.5 ms of encoder + 0.3 ms of
    # verifier; only a hit rate over 53% would pay, more than the cold hit rate (40%) grants.
    cost = LookupCost(probe_every=10)
    cost.record_model(rows=32, inference_ms=32 * 1.5)
    cost.record_lookup(rows=32, hits=0, encoder_ms=32 * 0.5, candidates=8, verifier_ms=8 * 1.2)
    assert not cost.paying
    assert sum(cost.should_look_up() for _ in range(50)) == 5


def test_a_hit_never_seems_to_save_more_than_the_average_row_costs() -> None:
    # Small runs timed while lookups share the cores: 4 rows in 60 ms, 2 rows in 10 ms. The
    # slope alone says 25 ms a row; no row costs more than the runs' average, 70 / 6 ms.
    cost = LookupCost(alpha=0.0, warmup_rows=0)
    for rows, ms in ((4, 60.0), (2, 10.0)):
        cost.record_model(rows=rows, inference_ms=ms)
    assert cost.model_ms_per_row.value == 70.0 / 6
    cost.record_lookup(rows=32, hits=27, encoder_ms=32 * 5.0, candidates=32, verifier_ms=32 * 10.0)
    assert not cost.paying  # 84% x 11.7 ms saved < 15 ms of encoder and verifier a row (the slope: 21 ms)


def test_a_slow_small_first_run_does_not_make_rows_free() -> None:
    # The worker's first run (one row, 40 ms: a cold start) and then 32 rows in 30 ms: the fitted
    # slope is negative; what a hit saves is then the average row, not nothing.
    cost = LookupCost(alpha=0.0, warmup_rows=0)
    cost.record_model(rows=1, inference_ms=40.0)
    cost.record_model(rows=32, inference_ms=30.0)
    assert cost.model_ms_per_row.value == 70.0 / 33
    cost.record_lookup(rows=32, hits=16, encoder_ms=32 * 0.5)
    assert cost.paying  # 50% x 2.1 ms > 0.5 ms


def test_until_the_first_verdict_only_the_first_batch_is_looked_up() -> None:
    # A worker prepares several batches before its first model run is timed; looking all of them
    # up cost faq-intent 9% of its throughput in the bench, where lookups never pay.
    cost = LookupCost(probe_every=50)
    assert cost.paying is None
    assert [cost.should_look_up() for _ in range(6)] == [True, False, False, False, False, False]
    cost.record_lookup(rows=32, hits=0, encoder_ms=32 * 0.7, candidates=8, verifier_ms=8 * 1.6)
    assert cost.paying is None  # no model run timed yet: nothing to weigh the lookup against
    cost.record_model(rows=32, inference_ms=32 * 1.2)
    assert cost.paying is False  # the model run settles it: 40% x 1.2 ms < 0.7 ms + 0.4 ms


def test_a_dear_model_gets_its_verdict_from_its_first_model_run() -> None:
    cost = LookupCost(probe_every=50)
    assert cost.should_look_up()
    cost.record_lookup(rows=32, hits=0, encoder_ms=32 * 0.7)
    cost.record_model(rows=32, inference_ms=32 * 17.0)
    assert cost.paying is True and all(cost.should_look_up() for _ in range(10))
