"""The semantic tier's A/B in `scripts/bench cache` (pure parts) and its dear model's graph: the
tiled sequence, run by ONNX Runtime on a tiny graph (no built model needed)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from fleet_dev.bench.cache_dear import tiled_graph
from fleet_dev.bench.cache_tier import ALWAYS, OFF, ON, describe, spread, tier_summary, tier_use, verdict
from fleet_dev.bench.cache_workload import TierShares
from fleet_dev.bench.plots import plot
from tests.paths import REPO_ROOT


def _run(per_s: float, *, semantic: int = 0, looked_up: float = 0.0, paying: bool | None = None) -> dict[str, Any]:
    shares = TierShares(requests=1000, exact_local=300.0, exact_redis=0.0, semantic=semantic, in_batch=0,
                        model=700 - semantic, errors=0)
    counters = {"semantic": float(semantic), "semantic_misses": looked_up - semantic, "verifier_accepted": float(semantic),
                "verifier_refused": float(semantic)}
    cost = {"version": "v", "ms_per_lookup": 0.4, "ms_per_candidate": 2.0, "encoder_ms_per_lookup": 1.0,
            "saved_ms_per_lookup": 3.0, "cost_ms_per_lookup": 1.4, "model_ms_per_row": 10.0, "hit_rate": 0.3,
            "paying": paying}
    return {"requests_per_s": per_s, "shares": shares, "counters": counters, "verifier": cost}


def _rounds(off: list[float], on: list[float], always: list[float]) -> list[dict[str, dict[str, Any]]]:
    return [{OFF: _run(a), ON: _run(b, semantic=100, looked_up=500.0, paying=True), ALWAYS: _run(c)}
            for a, b, c in zip(off, on, always, strict=True)]


def test_the_on_off_ratio_is_taken_within_each_round_and_summarised_with_its_spread() -> None:
    summary = tier_summary("dear", _rounds([100, 50, 80], [150, 70, 88], [90, 45, 70]), None)
    assert summary["ratio"] == {"median": 1.4, "min": 1.1, "max": 1.5}
    assert summary["off_per_s"] == {"median": 80, "min": 50, "max": 100}
    assert math.isclose(summary["always_ratio"]["median"], 0.9)
    assert verdict(summary) == "pays"


def test_a_tier_that_stays_off_within_noise_is_no_gain_no_loss_and_a_slower_one_costs() -> None:
    same = tier_summary("faq", _rounds([100, 100, 100], [98, 103, 101], [80, 80, 80]), None)
    same["on_run"]["paying"] = False
    assert verdict(same) == "no gain, no loss (lookups off: they do not pay)"
    slower = tier_summary("faq", _rounds([100, 100, 100], [80, 85, 90], [80, 80, 80]), None)
    assert verdict(slower) == "costs throughput"


def test_tier_use_counts_lookups_against_exact_misses_and_refusals_against_candidates() -> None:
    use = tier_use(_run(100, semantic=70, looked_up=350.0, paying=True))
    assert math.isclose(use["exact"], 0.3) and math.isclose(use["semantic"], 0.07)
    assert math.isclose(use["looked_up"], 0.5)  # 350 of the 700 exact misses
    assert math.isclose(use["candidates_per_lookup"], 140 / 350) and math.isclose(use["refused"], 0.5)
    assert use["ms_per_lookup"] == 0.4 and use["paying"] is True


def test_the_report_prints_both_tables() -> None:
    text = describe([tier_summary("faq-intent", _rounds([100, 90, 95], [99, 92, 96], [80, 70, 75]),
                                  {"ms_per_row": 3.0, "times_first": 3.1})], 4000)
    assert "3 interleaved rounds" in text and "faq-intent" in text and "3.00 ms (3.1x)" in text
    assert "verifier ms" in text and "always" in text
    assert all(math.isnan(value) for value in spread([]).values())  # no rounds: nothing to report, no crash


def _toy_encoder() -> onnx.ModelProto:
    """score = sum over the sequence of (ids x mask): its cost and value grow with the sequence."""
    nodes = [helper.make_node("Mul", ["input_ids", "attention_mask"], ["masked"]),
             helper.make_node("ReduceSum", ["masked"], ["score"], keepdims=1, axes=[1])]
    graph = helper.make_graph(nodes, "toy", [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
                                             for name in ("input_ids", "attention_mask")],
                              [helper.make_tensor_value_info("score", TensorProto.INT64, ["batch", 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 7
    return model


def test_the_dear_graph_reads_each_rows_tokens_tiles_times_over() -> None:
    model = tiled_graph(_toy_encoder(), 3)
    onnx.checker.check_model(model)
    assert [value.name for value in model.graph.input] == ["input_ids", "attention_mask"]  # what the worker feeds
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ids = np.array([[1, 2, 3], [4, 5, 0]], dtype=np.int64)
    mask = np.array([[1, 1, 1], [1, 1, 0]], dtype=np.int64)
    (score,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
    assert score.tolist() == [[18], [27]]  # three times the untiled sums, 6 and 9


def test_the_recorded_run_plots_the_tiers_ratios(tmp_path: Path) -> None:
    recorded = REPO_ROOT / "docs" / "benchmarks" / "data" / "cache-2026-12-03.json"
    document = json.loads(recorded.read_text())
    assert [summary["model"] for summary in document["semantic_tier"]] == ["faq-intent", "faq-intent-dear"]
    png = plot(document, tmp_path / "cache.png")
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and png.stat().st_size > 40_000  # three panels
