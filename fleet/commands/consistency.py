"""`fleet consistency`: do the embeddings the fleet served match the model run offline?

    fleet consistency minilm-embed --sample 200
    fleet consistency minilm-embed --version minilm-embed-20261130-002 --cosine 0.999

Takes the last `--sample` requests on `fleet.requests.<model>` (read back from the end of
every partition), looks up each one's live result in Redis (`fleet:result:<id>`), recomputes
the embedding in this process with the version the result names (or `--version`), and
compares: an item agrees when the cosine of live and offline is >= `--cosine`. Requests
without a live result (expired from Redis, not served yet) or without an embedding (error,
expired) are skipped and counted.

Exit status: 0 when the agreement rate is >= `--min-agreement`, 1 when below, 2 when nothing
could be compared.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from pydantic import Field
from redis.asyncio import Redis

from common.clients import redis_client
from common.redis_cluster import mget_all
from common.settings import FleetSettings
from common.topics import newest_records
from fleet.arguments import command_parser
from fleet.exits import Exit
from schemas.names import requests_topic, result_key
from schemas.wire import Request, Result, Status, WireError
from models import ModelRegistry, RegistryError, RuntimeOptions
from workers import WorkerSettings


class ConsistencySettings(WorkerSettings):
    """Worker settings, so the offline run tokenises and truncates exactly like the workers."""

    consistency_sample: int = Field(200, ge=1, description="How many of the latest requests to check")
    consistency_min_agreement: float = Field(0.99, ge=0, le=1, description="Pass when this share agrees")
    consistency_cosine: float = Field(0.999, ge=-1, le=1, description="An item agrees at this cosine or above")



# --- comparison and report (pure) -------------------------------------------------------------


def row_cosines(live: npt.NDArray[np.float32], offline: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    """Cosine of each row of `live` with the same row of `offline` (0 where a row is all zeros)."""
    a = np.asarray(live, dtype=np.float64)
    b = np.asarray(offline, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"live embeddings {a.shape} and offline embeddings {b.shape} differ in shape")
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.einsum("ij,ij->i", a, b)
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


@dataclass(frozen=True)
class Comparison:
    request_id: str
    text: str
    live_version: str
    offline_version: str
    cosine: float


@dataclass(frozen=True)
class ConsistencyReport:
    comparisons: tuple[Comparison, ...]
    skipped: Counter[str]  # reason -> how many sampled requests could not be compared
    cosine_threshold: float
    min_agreement: float

    @property
    def compared(self) -> int:
        return len(self.comparisons)

    @property
    def agreed(self) -> int:
        return sum(c.cosine >= self.cosine_threshold for c in self.comparisons)

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.compared if self.compared else None

    @property
    def exit_code(self) -> Exit:
        if self.agreement is None:
            return Exit.UNAVAILABLE  # nothing compared: no verdict either way
        return Exit.OK if self.agreement >= self.min_agreement else Exit.FAILED

    def worst(self, count: int = 5) -> list[Comparison]:
        return sorted(self.comparisons, key=lambda c: c.cosine)[:count]


def _shorten(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def format_report(report: ConsistencyReport, *, worst: int = 5, text_width: int = 48) -> str:
    skipped = sum(report.skipped.values())
    reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(report.skipped.items()))
    lines = [f"sampled {report.compared + skipped}: compared {report.compared}, skipped {skipped}"
             + (f" ({reasons})" if reasons else "")]
    if report.agreement is None:
        lines.append("nothing to compare: no sampled request could be checked (see the skipped reasons)")
        return "\n".join(lines)
    pairs = Counter((c.live_version, c.offline_version) for c in report.comparisons)
    lines.append("live version -> offline version: "
                 + ", ".join(f"{live} -> {offline} ({n})" for (live, offline), n in sorted(pairs.items())))
    cosines = np.array([c.cosine for c in report.comparisons])
    verdict = "PASS" if report.exit_code is Exit.OK else "FAIL"
    lines.append(f"agreement {report.agreement:.2%} ({report.agreed}/{report.compared} at cosine >= "
                 f"{report.cosine_threshold:g}); needed {report.min_agreement:.2%}: {verdict}")
    lines.append(f"cosine min {cosines.min():.6f}  mean {cosines.mean():.6f}  median {np.median(cosines):.6f}")
    lines.append("worst:")
    lines += [f"  {c.request_id}  {c.cosine:.6f}  {_shorten(c.text, text_width)!r}" for c in report.worst(worst)]
    return "\n".join(lines)


# --- gathering live results -------------------------------------------------------------------


@dataclass
class Sample:
    """The latest requests and their live results, plus what had to be skipped."""

    pairs: list[tuple[Request, Result]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


async def latest_requests(settings: FleetSettings, topic: str, count: int) -> tuple[list[Request], int]:
    """The `count` most recent decodable requests on `topic` by record time, and how many records
    among them were not decodable."""
    # The newest `count` overall are among the newest `count` of each partition.
    timeline: list[tuple[int, int, Request | None]] = []
    for record in await newest_records(settings, topic, count):
        try:
            timeline.append((record.timestamp, record.offset, Request.decode(record.value or b"")))
        except WireError:
            timeline.append((record.timestamp, record.offset, None))
    return newest_decodable(timeline, count)


def newest_decodable(timeline: list[tuple[int, int, Request | None]], count: int) -> tuple[list[Request], int]:
    """From the newest record back, the first `count` requests (oldest first) and the undecodable
    records (None) met on the way: older garbage, outside the sample, is none of its business."""
    sample: list[Request] = []
    skipped = 0
    for _, _, request in sorted(timeline, key=lambda item: (item[0], item[1]), reverse=True):
        if len(sample) == count:
            break
        if request is None:
            skipped += 1
        else:
            sample.append(request)
    return sample[::-1], skipped


async def gather_sample(settings: ConsistencySettings, model: str, count: int) -> Sample:
    requests, undecodable = await latest_requests(settings, requests_topic(model), count)
    sample = Sample()
    if undecodable:
        sample.skipped["undecodable record"] = undecodable
    if not requests:
        return sample
    redis = redis_client(settings)
    try:
        raw = await mget_all(redis, [result_key(r.id) for r in requests])
    finally:
        await redis.aclose()
    for request, value in zip(requests, raw, strict=True):
        if value is None:
            sample.skipped["no live result"] += 1
            continue
        try:
            result = Result.decode(value)
        except WireError:
            sample.skipped["undecodable result"] += 1
            continue
        embedding = (result.outputs or {}).get("embedding")
        if result.status not in (Status.ok, Status.degraded) or embedding is None:
            sample.skipped[f"status {result.status.value}"] += 1
        elif not isinstance(request.inputs.get("text"), str):
            sample.skipped["no text input"] += 1
        else:
            sample.pairs.append((request, result))
    return sample


# --- recomputing offline ----------------------------------------------------------------------


def recompute(settings: ConsistencySettings, model: str, sample: Sample, version: str | None,
              *, batch_size: int = 32) -> tuple[list[Comparison], Counter[str]]:
    """Embed every sampled text with its result's version (or `version`) and compare with the live one."""
    from models import OnnxEmbeddingBackend  # ONNX Runtime loads only when a check runs

    registry = ModelRegistry(settings.registry_dir)
    by_version: dict[str, list[tuple[Request, Result]]] = {}
    comparisons: list[Comparison] = []
    skipped: Counter[str] = Counter()
    for request, result in sample.pairs:
        wanted = version or result.version
        if wanted is None:
            skipped["result names no version"] += 1  # guessing one would compare against the wrong model
        else:
            by_version.setdefault(wanted, []).append((request, result))
    for offline_version, pairs in sorted(by_version.items()):
        try:
            manifest = registry.resolve(model, offline_version)
        except RegistryError as missing:
            print(f"cannot recompute with {offline_version}: {missing}", file=sys.stderr)
            skipped[f"version {offline_version} not in registry"] += len(pairs)
            continue
        print(f"recomputing {len(pairs)} embeddings with {manifest.id} ({manifest.precision}) ...", file=sys.stderr)
        backend = OnnxEmbeddingBackend.load(registry, manifest, RuntimeOptions(
            intra_op_threads=settings.intra_op_threads, max_input_tokens=settings.max_input_tokens,
            length_bucket_size=settings.length_bucket_size, graph_optimization=settings.graph_optimization))
        for first in range(0, len(pairs), batch_size):
            chunk = pairs[first:first + batch_size]
            offline = backend.infer([request.text for request, _ in chunk])
            live = np.array([(result.outputs or {})["embedding"] for _, result in chunk], dtype=np.float32)
            if live.shape != offline.shape:
                skipped[f"embedding width differs from {manifest.id}"] += len(chunk)
                continue
            for (request, result), cosine in zip(chunk, row_cosines(live, offline), strict=True):
                comparisons.append(Comparison(request.id, request.text, result.version or "?", manifest.id, float(cosine)))
    return comparisons, skipped


async def check_consistency(settings: ConsistencySettings, model: str, *, sample_size: int, version: str | None = None,
                            min_agreement: float = 0.99, cosine: float = 0.999) -> ConsistencyReport:
    sample = await gather_sample(settings, model, sample_size)
    comparisons, skipped = await asyncio.to_thread(recompute, settings, model, sample, version)
    return ConsistencyReport(tuple(comparisons), sample.skipped + skipped, cosine, min_agreement)


def main(argv: list[str] | None = None) -> int:
    settings = ConsistencySettings()
    parser = command_parser("consistency", __doc__)
    parser.add_argument("model")
    parser.add_argument("--sample", type=int, default=settings.consistency_sample, metavar="N",
                        help="check the latest N requests (default %(default)s)")
    parser.add_argument("--version", metavar="V", help="recompute with this version instead of the one each result names")
    parser.add_argument("--min-agreement", type=float, default=settings.consistency_min_agreement,
                        help="pass when at least this share agrees (default %(default)s)")
    parser.add_argument("--cosine", type=float, default=settings.consistency_cosine,
                        help="an item agrees at this cosine or above (default %(default)s)")
    parser.add_argument("--worst", type=int, default=5, help="how many of the worst cases to list")
    args = parser.parse_args(argv)
    if args.sample < 1:
        parser.error("--sample must be at least 1")
    report = asyncio.run(check_consistency(settings, args.model, sample_size=args.sample, version=args.version,
                                           min_agreement=args.min_agreement, cosine=args.cosine))
    print(format_report(report, worst=args.worst))
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
