from workers.cache.semantic_cost import LookupCost


def test_a_model_barely_dearer_than_the_encoder_stops_lookups_at_once() -> None:
    # Even a 100% hit rate would save 0.5 ms a row against 0.6 ms of encoder: never pays.
    cost = LookupCost(probe_every=10)
    assert cost.should_look_up()
    cost.record_model(rows=32, inference_ms=32 * 0.5)
    cost.record_lookup(rows=32, hits=0, encoder_ms=32 * 0.6)
    assert not cost.paying
    assert sum(cost.should_look_up() for _ in range(100)) == 10


def test_a_dear_model_is_looked_up_until_measured_hits_stop_paying() -> None:
    cost = LookupCost(probe_every=10, alpha=0.5)
    cost.record_model(rows=32, inference_ms=32 * 5.0)  # ten times the encoder
    cost.record_lookup(rows=32, hits=16, encoder_ms=32 * 0.5)  # 50% hits: pays
    assert cost.paying and all(cost.should_look_up() for _ in range(20))
    for _ in range(6):
        cost.record_lookup(rows=32, hits=1, encoder_ms=32 * 0.5)  # hits dried up: ~3% x 5 ms < 0.5 ms
    assert not cost.paying


def test_lookups_resume_when_probes_find_enough_hits() -> None:
    cost = LookupCost(probe_every=2, alpha=1.0)
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
