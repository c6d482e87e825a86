from workers.semantic_cost import LookupCost


def test_lookups_that_cost_more_than_they_save_are_probed_only() -> None:
    cost = LookupCost(probe_every=10, min_batches=5)
    cost.record_model(rows=32, inference_ms=32 * 0.5)  # model: 0.5 ms per row
    for _ in range(5):
        assert cost.should_look_up()
        cost.record_lookup(rows=32, hits=8, encoder_ms=32 * 0.3)  # 25% hits save 0.125 ms < 0.3 ms encoder
    assert not cost.paying
    looked = sum(cost.should_look_up() for _ in range(100))
    assert looked == 10


def test_lookups_pay_when_hits_save_more_model_time_than_the_encoder_costs() -> None:
    cost = LookupCost(probe_every=10, min_batches=5)
    cost.record_model(rows=32, inference_ms=32 * 5.0)  # a model 10x dearer than the encoder
    for _ in range(5):
        cost.record_lookup(rows=32, hits=8, encoder_ms=32 * 0.5)
    assert cost.paying and all(cost.should_look_up() for _ in range(20))


def test_it_recovers_once_hits_become_frequent() -> None:
    cost = LookupCost(probe_every=2, min_batches=1, alpha=1.0)
    cost.record_model(rows=10, inference_ms=10.0)
    cost.record_lookup(rows=10, hits=1, encoder_ms=5.0)
    assert not cost.paying
    cost.record_lookup(rows=10, hits=9, encoder_ms=5.0)
    assert cost.paying
