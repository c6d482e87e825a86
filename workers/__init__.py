"""The worker: one model, one role, one device, one backend (`fleet-worker`, workers/main.py).

What other packages may import from here is the public surface below (common/surface.py); the
`fleet` command line imports nothing else of the worker (tests/unit/test_layout.py).
"""

from common.surface import public_surface

PUBLIC = {
    # settings: what a command shares with the workers it inspects or starts
    "WorkerSettings": "workers.settings",
    "ShadowSettings": "workers.shadow.settings",
    # the shadow worker and its replay of a past window (`fleet shadow run | replay`)
    "serve_shadow": "workers.shadow.worker",
    "ReplayWindow": "workers.shadow.replay",
    "ShadowReplay": "workers.shadow.replay",
    "parse_duration": "workers.shadow.replay",
    "parse_time": "workers.shadow.replay",
    # the caches: clearing the exact cache (`fleet cache`), the semantic cache's check (`fleet cache-eval`)
    "clear_model_cache": "workers.cache.exact",
    "CACHE_SCAN_BATCH": "workers.cache.exact:SCAN_BATCH",
    "SemanticCache": "workers.cache.semantic",
    "SEMANTIC_THRESHOLD": "workers.cache.semantic:DEFAULT_THRESHOLD",
    "meaning_conflict": "workers.cache.guards",
    "verified_conflict": "workers.cache.guards",
    "GUARD_CHECKS": "workers.cache.guards:CHECKS",
    "BEFORE_VERIFIER": "workers.cache.guards",
    "guard_conflicts": "workers.cache.guards:conflicts",
    "guard_features": "workers.cache.guards:features",
    # which encoder and verifier the semantic tier reads with when the settings name none
    "semantic_models": "workers.cache.semantic_models",
    "DEFAULT_ENCODER": "workers.cache.semantic_models",
    "VERIFIER_OF_ENCODER": "workers.cache.semantic_models",
    "CacheVerifier": "workers.cache.verifier",
    # the semantic tier's learned bounds as their workers share them (the console)
    "bound_from_fields": "workers.cache.learned_bound",
    "describe_bound": "workers.cache.learned_bound:describe",
    # dead letters (`fleet dlq`) and redacted traces (the console)
    "DeadLetterPolicy": "workers.delivery.dead_letters",
    "Redactor": "workers.observability.redaction",
}
__all__ = sorted(PUBLIC)
__getattr__, __dir__ = public_surface(__name__, PUBLIC)
