"""The semantic verifier's figures in `scripts/bench cache`: its cost per lookup, read from the
semantic tier's own cost model (what the tier uses to decide whether lookups pay)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from models.registry import ModelRegistry
from workers.cache.verifier import CacheVerifier
from workers.worker import Worker


def verifier_cost(worker: Worker) -> dict[str, Any] | None:
    """What the semantic tier's lookups cost per row looked up (encoder, verifier) and what its hits
    save, from the tier's own cost model; None without a semantic tier. `version` is the verifier's
    (None where none is registered)."""
    tier = worker.caches.semantic
    if tier is None:
        return None
    cost = tier.cost
    return {"version": None if tier.verifier is None else tier.verifier.manifest.id,
            "ms_per_lookup": cost.verifier_ms_per_row, "ms_per_candidate": cost.verifier_ms_per_candidate.value,
            "candidates_per_lookup": cost.candidates_per_row.value, "encoder_ms_per_lookup": cost.encoder_ms_per_row.value,
            "saved_ms_per_lookup": cost.saved_ms_per_row, "cost_ms_per_lookup": cost.cost_ms_per_row,
            "model_ms_per_row": cost.model_ms_per_row.value, "hit_rate": cost.hit_rate.value, "paying": cost.paying}


def describe_verifier(verifier: dict[str, Any] | None) -> str:
    if verifier is None or verifier["version"] is None:
        return "semantic verifier: none registered (cosine threshold and guards alone)"
    per_candidate = verifier["ms_per_candidate"]
    return (f"semantic verifier {verifier['version']}: {verifier['ms_per_lookup']:.3f} ms per lookup "
            f"({verifier['candidates_per_lookup'] or 0:.2f} candidates per lookup x "
            f"{per_candidate if per_candidate is not None else 0:.3f} ms each; encoder "
            f"{verifier['encoder_ms_per_lookup'] or 0:.3f} ms per lookup); lookups "
            f"{'pay' if verifier['paying'] else 'do not pay'}")


def verifier_ms_per_candidate(registry_dir: Path, texts: Sequence[str], pairs: int = 256,
                              batch: int = 32) -> dict[str, Any] | None:
    """The verifier alone, as the tier runs it (INT8, one thread), over `pairs` (text, other text) pairs
    of the workload in batches of `batch`: ms per candidate, whatever the tier's hit rate let it see."""
    verifier = CacheVerifier.newest(ModelRegistry(registry_dir))
    if verifier is None or len(texts) < 2:
        return None
    chosen = [(texts[i % len(texts)], texts[(i * 7 + 1) % len(texts)]) for i in range(pairs)]
    verifier.score(chosen[:batch])  # warm-up: the first run allocates
    elapsed = sum(verifier.score(chosen[i:i + batch]).elapsed_ms for i in range(0, pairs, batch))
    return {"version": verifier.manifest.id, "pairs": pairs, "batch": batch, "ms_per_candidate": elapsed / pairs}


def describe_standalone(measured: dict[str, Any] | None) -> str:
    if measured is None:
        return ""
    per = measured["ms_per_candidate"]
    return (f"semantic verifier alone ({measured['version']}, 1 thread, batches of {measured['batch']}): "
            f"{per:.3f} ms per candidate; a lookup judges at most 3 candidates: <= {3 * per:.3f} ms per lookup")
