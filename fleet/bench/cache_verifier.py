"""The semantic verifier's figures in `scripts/bench cache`: its cost per lookup, read from the
semantic tier's own cost model (what the tier uses to decide whether lookups pay)."""

from __future__ import annotations

from typing import Any

from workers.worker import Worker


def verifier_cost(worker: Worker) -> dict[str, Any] | None:
    """What the semantic tier's verifier cost per row looked up, from the tier's own cost model."""
    tier = worker.caches.semantic
    if tier is None or tier.verifier is None:
        return None
    cost = tier.cost
    return {"version": tier.verifier.manifest.id, "ms_per_lookup": cost.verifier_ms_per_row,
            "ms_per_candidate": cost.verifier_ms_per_candidate.value, "candidates_per_lookup": cost.candidates_per_row.value,
            "encoder_ms_per_lookup": cost.encoder_ms_per_row.value, "paying": cost.paying}


def describe_verifier(verifier: dict[str, Any] | None) -> str:
    if verifier is None:
        return "semantic verifier: none registered (cosine threshold and guards alone)"
    per_candidate = verifier["ms_per_candidate"]
    return (f"semantic verifier {verifier['version']}: {verifier['ms_per_lookup']:.3f} ms per lookup "
            f"({verifier['candidates_per_lookup'] or 0:.2f} candidates per lookup x "
            f"{per_candidate if per_candidate is not None else 0:.3f} ms each; encoder "
            f"{verifier['encoder_ms_per_lookup'] or 0:.3f} ms per lookup); lookups "
            f"{'pay' if verifier['paying'] else 'do not pay'}")
