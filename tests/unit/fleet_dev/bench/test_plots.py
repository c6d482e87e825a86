"""The benches' plots: drawn from the JSON each bench writes, by kind, as PNG files beside it."""

import json
import math
from pathlib import Path

import pytest

from fleet_dev.bench.device import Row, write_rows
from fleet_dev.bench.plots import kind_of, main, plot_beside
from tests.paths import REPO_ROOT

RECORDED = REPO_ROOT / "docs" / "benchmarks" / "data"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name, kind", [("batching-2026-12-02.json", "batching"), ("device-2026-12-02.json", "device"),
                                        ("cache-2026-11-30.json", "cache"), ("gateway-2026-12-02.json", "gateway")])
def test_a_recorded_document_is_plotted_beside_itself(tmp_path: Path, name: str, kind: str) -> None:
    document = tmp_path / name
    document.write_text((RECORDED / name).read_text())
    assert kind_of(json.loads(document.read_text())) == kind
    png = plot_beside(document)
    assert png == document.with_suffix(".png")
    assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size > 20_000


def test_the_device_bench_writes_json_that_plots(tmp_path: Path) -> None:
    rows = [Row("h200-minilm", batch, mode, 1000.0 * batch ** 0.5, 2000.0 * batch ** 0.5, 5.0, 20.0 * batch, 0.1)
            for batch in (1, 32, 256) for mode in ("drain", "closed 64", "open 500/s")]
    scaled = [Row("h200-minilm", 256, mode, 9000.0 + 1000 * n, 17000.0 * n, worker_cpu_ms=0.05)
              for n, mode in ((1, "drain"), (2, "drain, 2 workers"))]
    path = write_rows(tmp_path / "device-20261203-080000.json", rows, scaled, quick=True)
    assert math.isnan(json.loads(path.read_text())["scaling"][0]["p50_ms"])
    assert plot_beside(path).read_bytes().startswith(PNG_MAGIC)


def test_the_command_draws_into_another_folder(tmp_path: Path) -> None:
    assert main([str(RECORDED / "cache-2026-11-30.json"), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "cache-2026-11-30.png").read_bytes().startswith(PNG_MAGIC)


def test_a_document_of_no_known_bench_is_refused() -> None:
    with pytest.raises(ValueError, match="not a batching, cache, device or gateway"):
        kind_of({"rows": [{"something": 1}]})


def test_the_batching_bench_writes_json_that_plots(tmp_path: Path) -> None:
    from fleet_dev.bench.raw import RawThroughput
    from fleet_dev.bench.report import BenchRow, PhaseSummary, write_json
    from fleet_dev.bench.stats import LatencySummary

    def phase(per_s: float, p99_ms: float) -> PhaseSummary:
        return PhaseSummary(per_s, LatencySummary(100, p99_ms / 3, p99_ms / 2, p99_ms, p99_ms), 100, {}, 8.0, {}, {},
                            {}, 0.0)

    rows = [BenchRow(f"{batch}/10ms", precision, "v1", "fixed", batch, 10.0, 3 * batch, 1, phase(100.0 * batch, 50.0),
                     50.0 * batch, phase(50.0 * batch, 30.0), RawThroughput(120.0 * batch, (), 1.0, batch, 100), None, ())
            for precision in ("fp32", "int8") for batch in (1, 8, 32)]
    path = tmp_path / "batching-test.json"
    write_json(path, meta={"started": "test"}, workload={}, rows=rows, checks=[], length_aware="not measured")
    assert kind_of(json.loads(path.read_text())) == "batching"
    assert plot_beside(path).read_bytes().startswith(PNG_MAGIC)


def test_the_gateway_bench_writes_json_that_plots(tmp_path: Path) -> None:
    from argparse import Namespace

    from fleet_dev.bench.gateway import Row as GatewayRow
    from fleet_dev.bench.gateway import write_json
    from fleet_dev.bench.http_load import HttpSamples

    def samples(callers: int) -> HttpSamples:
        return HttpSamples(window_s=8.0, latencies_ms=[float(1 + i % 30) for i in range(8 * callers)],
                           statuses={200: 8 * callers - 2, 429: 2})

    rows = [GatewayRow(processes, path, route, callers, samples(callers), 0.2 * callers, 0.1 * callers, 0.02 * callers)
            for processes in (1, 2) for path, route in (("fast path", "/v1"), ("FastAPI", "/v1"), ("fast path", "OIP binary"))
            for callers in (64, 128)]
    path = write_json(tmp_path / "gateway.json", rows, Namespace(seconds=8.0))
    document = json.loads(path.read_text())
    assert kind_of(document) == "gateway"
    assert document["gateway_rows"][0]["non_200"] == {"429": 2}
    assert document["gateway_rows"][0]["requests_per_s"] == 64.0
    assert plot_beside(path).read_bytes().startswith(PNG_MAGIC)
