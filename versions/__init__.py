"""Model versions control plane: pointers in Redis, deterministic routing, live stats, staged rollout.

Only this package writes a model's version pointers (`schemas.names.versions_key`); workers
and shadow consumers read them. `routing` and `rollout_gates` are pure; `pointers`, `stats`
and `rollout` talk to Redis through a client they are given.
"""

from common.surface import public_surface

# The public surface (common/surface.py): what the `fleet` command line and the console import
# (tests/unit/test_layout.py holds them to it); workers read the modules themselves.
PUBLIC = {
    "VersionPointers": "versions.pointers",
    "PointerState": "versions.pointers",
    "PointerError": "versions.pointers",
    "RolloutState": "versions.pointers",
    "AuditEntry": "versions.pointers",
    "read_pointers": "versions.pointers",
    "RolloutController": "versions.rollout",
    "RolloutEvent": "versions.rollout",
    "RolloutOutcome": "versions.rollout",
    "read_report": "versions.rollout",
    "RolloutPlan": "versions.rollout_gates",
    "RolloutSettings": "versions.rollout_gates",
    "parse_stages": "versions.rollout_gates",
    "stage_label": "versions.rollout_gates",
    "StatsWindow": "versions.stats",
    "StatsSnapshot": "versions.stats",
    "VersionStats": "versions.stats",
    "ShadowSnapshot": "versions.stats",
    "read_shadow": "versions.stats",
}
__all__ = sorted(PUBLIC)
__getattr__, __dir__ = public_surface(__name__, PUBLIC)
