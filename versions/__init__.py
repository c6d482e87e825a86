"""Model versions control plane: pointers in Redis, deterministic routing, live stats, staged rollout.

Only this package writes a model's version pointers (`schemas.names.versions_key`); workers
and shadow consumers read them. `routing` and `rollout_gates` are pure; `pointers`, `stats`
and `rollout` talk to Redis through a client they are given.
"""
