from workers.semantic_cost import LookupCost


def test_without_evidence_of_hits_only_one_batch_in_n_is_looked_up() -> None:
    cost = LookupCost(probe_every=10)
    assert sum(cost.should_look_up() for _ in range(100)) == 10


def test_lookups_that_cost_more_than_they_save_stay_probes() -> None:
    cost = LookupCost(probe_every=10)
    cost.record_model(rows=32, inference_ms=32 * 0.5)  # model: 0.5 ms per row
    cost.record_lookup(rows=32, hits=8, encoder_ms=32 * 0.3)  # 25% hits save 0.125 ms < 0.3 ms of encoder
    assert not cost.paying
    assert sum(cost.should_look_up() for _ in range(100)) == 10


def test_lookups_run_on_every_batch_once_hits_save_more_than_the_encoder_costs() -> None:
    cost = LookupCost(probe_every=10, alpha=1.0)
    cost.record_model(rows=32, inference_ms=32 * 5.0)  # a model 10x dearer than the encoder
    cost.record_lookup(rows=32, hits=8, encoder_ms=32 * 0.5)
    assert cost.paying and all(cost.should_look_up() for _ in range(20))
    cost.record_lookup(rows=32, hits=1, encoder_ms=32 * 0.5)  # hits dried up
    assert not cost.paying
