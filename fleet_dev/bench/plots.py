"""PNG plots beside a benchmark's JSON: people see the knee of a curve faster than they read it
in a table. Each bench calls `plot_beside(json_path)` once after writing its JSON; the plots can
be drawn again from any saved JSON with `python -m fleet_dev.bench.plots FILE.json ...`.

matplotlib is an optional extra (`plots`); without it a bench says so and carries on. The Agg
backend draws to files only: no display is needed or opened."""

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Document = dict[str, Any]
FLEET_COLOR, RAW_COLOR, CEILING_COLOR = "#3f51b5", "#9e9e9e", "#e57373"
TIER_COLORS = {"exact_local": "#3f51b5", "exact_redis": "#7986cb", "semantic": "#26a69a", "in_batch": "#ffb74d"}


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def kind_of(document: Document) -> str:
    """Which bench wrote the document, from what it holds."""
    if "cache_scenario" in document:
        return "cache"
    if "gateway_rows" in document:
        return "gateway"
    rows = document.get("rows", [])
    if rows and "preset" in rows[0]:
        return "device"
    if rows and "saturation" in rows[0]:
        return "batching"
    raise ValueError("not a batching, cache, device or gateway bench document")


def batching_figure(document: Document) -> Any:
    """Throughput (fleet against the raw model) and p99 against max batch, one line per precision."""
    plt = pyplot()
    figure, (throughput, latency) = plt.subplots(1, 2, figsize=(11, 4.2))
    rows = [row for row in document["rows"] if row["policy"] != "adaptive"]
    for precision, style in zip(sorted({row["precision"] for row in rows}), ("-", "--"), strict=False):
        mine = sorted((row for row in rows if row["precision"] == precision), key=lambda row: row["max_batch"])
        batches = [row["max_batch"] for row in mine]
        throughput.plot(batches, [row["saturation"]["requests_per_s"] for row in mine], style, marker="o",
                        color=FLEET_COLOR, label=f"fleet {precision}")
        throughput.plot(batches, [row["raw"]["sentences_per_s"] for row in mine], style, marker="s",
                        color=RAW_COLOR, label=f"raw model {precision}")
        latency.plot(batches, [row["saturation"]["latency"]["p99_ms"] for row in mine], style, marker="o",
                     color=FLEET_COLOR, label=f"saturation {precision}")
        latency.plot(batches, [row["half_load"]["latency"]["p99_ms"] for row in mine], style, marker="^",
                     color=CEILING_COLOR, label=f"50% load {precision}")
    for axes, title, unit in ((throughput, "Throughput at saturation", "requests / s"),
                              (latency, "p99 latency, end to end", "ms")):
        axes.set(title=title, xlabel="max batch size", ylabel=unit, xscale="log")
        axes.set_xticks([1, 8, 32, 64], labels=["1", "8", "32", "64"])
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    return figure


def device_figure(document: Document) -> Any:
    """One worker on the simulated device: drained and loop req/s against the device's ceiling and
    p99 against max batch, then the scaling rows."""
    plt = pyplot()
    figure, (throughput, latency, scaling) = plt.subplots(1, 3, figsize=(14, 4.2))
    rows = [row for row in document["rows"] if row["preset"] == "h200-minilm"]
    drains = sorted((row for row in rows if row["mode"] == "drain"), key=lambda row: row["max_batch"])
    batches = [row["max_batch"] for row in drains]
    throughput.plot(batches, [row["ceiling"] for row in drains], ":", color=CEILING_COLOR, label="device ceiling")
    throughput.plot(batches, [row["req_per_s"] for row in drains], marker="o", color=FLEET_COLOR, label="drain")
    for mode, marker in (("closed", "s"), ("open", "^")):
        loop = sorted((row for row in rows if row["mode"].startswith(mode)), key=lambda row: row["max_batch"])
        if loop:
            throughput.plot([row["max_batch"] for row in loop], [row["req_per_s"] for row in loop], "--",
                            marker=marker, color=RAW_COLOR, label=f"{mode} loop")
            latency.plot([row["max_batch"] for row in loop], [row["p99_ms"] for row in loop], marker=marker,
                         label=f"{mode} loop p99")
    scaled = document.get("scaling", [])
    if scaled:
        workers = [int(row["mode"].split()[1]) if "workers" in row["mode"] else 1 for row in scaled]
        scaling.bar([str(count) for count in workers], [row["req_per_s"] for row in scaled], color=FLEET_COLOR)
        scaling.set(title="Scaling: workers draining one backlog", xlabel="workers", ylabel="requests / s")
    for axes, title, unit in ((throughput, "One worker, h200-minilm preset", "requests / s"),
                              (latency, "p99 latency, end to end", "ms")):
        axes.set(title=title, xlabel="max batch size", ylabel=unit, xscale="log")
        axes.set_xticks(batches, labels=[str(batch) for batch in batches])
        axes.legend(fontsize=8)
    latency.set_yscale("log")
    for axes in (throughput, latency, scaling):
        axes.grid(alpha=0.3)
    return figure


def median_runs(document: Document) -> list[Document]:
    """The median-throughput run of each cache configuration, in the order they first ran."""
    by_caches: dict[str, list[Document]] = {}
    for run in document["cache_scenario"]:
        by_caches.setdefault(run["caches"], []).append(run)
    return [sorted(runs, key=lambda run: run["requests_per_s"])[len(runs) // 2] for runs in by_caches.values()]


def cache_figure(document: Document) -> Any:
    """The cache scenario: where answers came from, and the throughput, per cache configuration."""
    plt = pyplot()
    tier = document.get("semantic_tier")
    figure, panels = plt.subplots(1, 3 if tier else 2, figsize=(16 if tier else 11, 4.2))
    shares, throughput = panels[0], panels[1]
    if tier:
        semantic_tier_panel(panels[2], tier)
    runs = median_runs(document)
    names = [run["caches"] for run in runs]
    bottom = [0.0] * len(runs)
    for tier, color in TIER_COLORS.items():
        values = [100 * run["tiers"].get(tier, 0.0) for run in runs]
        shares.bar(names, values, bottom=bottom, color=color, label=tier.replace("_", " "))
        bottom = [base + value for base, value in zip(bottom, values, strict=True)]
    shares.set(title="Answered without the model", ylabel="% of requests", ylim=(0, 100))
    shares.legend(fontsize=8)
    throughput.bar(names, [run["requests_per_s"] for run in runs], color=FLEET_COLOR)
    off = next((run["requests_per_s"] for run in runs if run["caches"] == "off"), None)
    if off:
        for index, run in enumerate(runs):
            throughput.annotate(f"{run['requests_per_s'] / off:.2f}x", (index, run["requests_per_s"]),
                                ha="center", va="bottom", fontsize=9)
    throughput.set(title="Throughput, backlog drained", ylabel="requests / s")
    for axes in (shares, throughput):
        axes.grid(alpha=0.3, axis="y")
    return figure


def semantic_tier_panel(axes: Any, tier: list[Document]) -> None:
    """Throughput with the semantic tier over without it, per model: lookups while they pay and
    on every batch; bars at the median round, whiskers from the slowest to the fastest round."""
    width = 0.38
    for offset, (key, label, color) in enumerate((("ratio", "while they pay", FLEET_COLOR),
                                                 ("always_ratio", "every batch", RAW_COLOR))):
        xs = [index + (offset - 0.5) * width for index in range(len(tier))]
        medians = [summary[key]["median"] for summary in tier]
        whiskers = [[m - summary[key]["min"] for m, summary in zip(medians, tier, strict=True)],
                    [summary[key]["max"] - m for m, summary in zip(medians, tier, strict=True)]]
        axes.bar(xs, medians, width, yerr=whiskers, capsize=3, color=color, label=f"lookups {label}")
        for x, median in zip(xs, medians, strict=True):
            axes.annotate(f"{median:.2f}x", (x, median), ha="center", va="bottom", fontsize=8)
    axes.axhline(1.0, color=CEILING_COLOR, linewidth=1)
    axes.set_xticks(range(len(tier)), labels=[summary["model"] for summary in tier])
    axes.set(title="Semantic tier on / off (exact cache in both)", ylabel="req/s ratio")
    axes.grid(alpha=0.3, axis="y")
    axes.legend(fontsize=8)


def gateway_figure(document: Document) -> Any:
    """req/s and the gateway's CPU per request against callers: one line per process count, model
    route path (fast path or FastAPI) and route (/v1 or the Open Inference Protocol's)."""
    plt = pyplot()
    figure, (throughput, cpu) = plt.subplots(1, 2, figsize=(11, 4.2))
    rows = document["gateway_rows"]
    markers = {"/v1": "o", "OIP JSON": "s", "OIP binary": "^"}
    for processes, path, route in sorted({(row["processes"], row["path"], row["route"]) for row in rows}):
        mine = sorted((row for row in rows if (row["processes"], row["path"], row["route"]) == (processes, path, route)),
                      key=lambda row: row["callers"])
        callers = [row["callers"] for row in mine]
        style = {"color": FLEET_COLOR if path == "fast path" else RAW_COLOR, "marker": markers.get(route, "o"),
                 "linestyle": "-" if processes == 1 else "--",
                 "label": f"{processes} process{'es' if processes > 1 else ''}, {path}"
                          + ("" if route == "/v1" else f", {route}")}
        throughput.plot(callers, [row["requests_per_s"] for row in mine], **style)
        cpu.plot(callers, [row["gateway_cpu_ms"] for row in mine], **style)
    for axes, title, unit in ((throughput, "Cached answers through the gateway", "requests / s"),
                              (cpu, "Gateway CPU per request", "ms")):
        axes.set(title=title, xlabel="closed-loop callers", ylabel=unit, xscale="log", ylim=(0, None))
        ticks = sorted({row["callers"] for row in rows})
        axes.set_xticks(ticks, labels=[str(tick) for tick in ticks])
        axes.set_xticks([], minor=True)  # the log axis's own minor labels would overlap the callers'
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    return figure


FIGURES: dict[str, Callable[[Document], Any]] = {"batching": batching_figure, "device": device_figure,
                                                 "cache": cache_figure, "gateway": gateway_figure}


def plot(document: Document, path: Path) -> Path:
    figure = FIGURES[kind_of(document)](document)
    caption = document.get("meta", {}).get("caption") or document.get("meta", {}).get("started")
    if caption:
        figure.suptitle(str(caption), fontsize=9, y=0.995, color="#616161")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    pyplot().close(figure)
    return path


def plot_beside(json_path: Path) -> Path | None:
    """The PNG beside a bench's JSON (same name, .png); None, with a note, where matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("no plots: matplotlib is not installed (pip install -e '.[plots]')", file=sys.stderr)
        return None
    path = plot(json.loads(json_path.read_text()), json_path.with_suffix(".png"))
    print(f"plot: {path}")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench plots",
                                     description="Draw the PNG plots of saved benchmark JSON documents.")
    parser.add_argument("documents", nargs="+", type=Path, help="JSON written by scripts/bench (batching, cache, "
                        "device, gateway)")
    parser.add_argument("--out", type=Path, help="folder for the PNGs (default: beside each JSON)")
    args = parser.parse_args(argv)
    for source in args.documents:
        target = (args.out / source.name if args.out else source).with_suffix(".png")
        print(plot(json.loads(source.read_text()), target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
