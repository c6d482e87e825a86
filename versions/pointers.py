"""A model's version pointers and rollout state in Redis, with an audit log of every change.

The hash `versions_key(model)` is the one place that says which version serves a model:
workers and shadow consumers poll it, only `VersionPointers` writes it. Every write is a
read-modify-write under WATCH and lands in one MULTI together with its audit entry on
`versions_audit_stream(model)`, so a CLI command and the rollout controller writing at the
same moment never lose an update and the log never misses or invents a change.

On a Redis Cluster the hash and the audit stream lie in different slots (both names are in
schemas/names.py, so no hash tag joins them) and no MULTI spans two slots: there the WATCH/MULTI
covers the hash alone, so updates are still never lost, and the audit entry follows right after
the EXEC; a writer that dies in between leaves a change without its audit entry, never the reverse.

Hash fields (all strings): stable, candidate (absent when none), percent (0..100, the
candidate's share of unpinned traffic), state, stage (index into the rollout's stage list,
-1 outside the canary stages), reason, updated_ms, actor; plus previous (the stable before
the last promotion, absent when none) and plan (JSON of the rollout plan, absent when none).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from redis.exceptions import WatchError

from common.catalog import list_model, serve_model
from common.redis_cluster import AnyRedis, is_cluster
from schemas.names import versions_audit_stream, versions_key
from models.registry import ModelRegistry
from versions.routing import pick_version

AUDIT_MAXLEN = 10_000
_MAX_WATCH_RETRIES = 50


class RolloutState(StrEnum):
    idle = "idle"
    shadow = "shadow"
    canary = "canary"
    paused = "paused"
    promoted = "promoted"
    rolled_back = "rolled_back"


ACTIVE_STATES = frozenset({RolloutState.shadow, RolloutState.canary, RolloutState.paused})


class PointerError(Exception):
    """A pointer change that makes no sense in the current state; the message says why."""


class PointerConflict(PointerError):
    """The pointers changed under the writer (e.g. an operator paused): re-read and decide again."""


def _text(value: bytes | str) -> str:
    # Works with clients made with or without decode_responses.
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class ServingPointers:
    """What a worker serves: stable, and the candidate with its share of unpinned traffic."""

    stable: str
    candidate: str | None = None
    percent: float = 0.0


def _number(text: str | None, default: float) -> float:
    try:
        return float(text) if text else default
    except ValueError:
        return default


@dataclass(frozen=True)
class PointerState:
    """The typed content of the versions hash; `PointerState()` is a model nobody has pointed yet."""

    stable: str | None = None
    candidate: str | None = None
    percent: float = 0.0
    state: RolloutState = RolloutState.idle
    stage: int = -1
    reason: str = ""
    updated_ms: int = 0
    actor: str = ""
    previous: str | None = None
    plan: str | None = None

    @property
    def active(self) -> bool:
        """A candidate is being shadowed or takes traffic (or is held there by a pause)."""
        return self.candidate is not None and self.state in ACTIVE_STATES

    def route(self, request_id: str) -> str | None:
        """The version an unpinned request goes to; None while no stable version is set."""
        if self.stable is None:
            return None
        return pick_version(request_id, self.stable, self.candidate, self.percent)

    @property
    def serving(self) -> ServingPointers | None:
        """The pointers a worker serves; None while no stable version is set."""
        if self.stable is None:
            return None
        return ServingPointers(self.stable, self.candidate, self.percent if self.candidate else 0.0)

    @classmethod
    def from_hash(cls, raw: Mapping[bytes | str, bytes | str]) -> PointerState:
        """The one reader of the versions hash. A number that does not parse reads as its default
        and the percentage is clamped to 0..100: a hand-edited hash must not stop every worker."""
        fields = {_text(k): _text(v) for k, v in raw.items()}
        state = fields.get("state") or RolloutState.idle
        return cls(
            stable=fields.get("stable") or None,
            candidate=fields.get("candidate") or None,
            percent=min(max(_number(fields.get("percent"), 0.0), 0.0), 100.0),
            state=RolloutState(state) if state in RolloutState.__members__ else RolloutState.idle,
            stage=int(_number(fields.get("stage"), -1)),
            reason=fields.get("reason", ""),
            updated_ms=int(_number(fields.get("updated_ms"), 0)),
            actor=fields.get("actor", ""),
            previous=fields.get("previous") or None,
            plan=fields.get("plan") or None,
        )

    def to_hash(self) -> dict[str, str]:
        """The hash fields; optional pointers that are None are left out (absent, not empty)."""
        fields = {"percent": f"{self.percent:g}", "state": self.state.value, "stage": str(self.stage),
                  "reason": self.reason, "updated_ms": str(self.updated_ms), "actor": self.actor}
        optional = {"stable": self.stable, "candidate": self.candidate, "previous": self.previous, "plan": self.plan}
        return fields | {name: value for name, value in optional.items() if value is not None}


async def read_pointers(redis: AnyRedis, model: str) -> PointerState:
    """A model's pointers as they are now (`PointerState()` when nobody has pointed it yet)."""
    return PointerState.from_hash(await redis.hgetall(versions_key(model)))  # type: ignore[misc]


@dataclass(frozen=True)
class AuditEntry:
    entry_id: str
    actor: str
    time_ms: int
    action: str
    before: dict[str, str]
    after: dict[str, str]
    reason: str

    @classmethod
    def from_stream(cls, entry_id: bytes | str, raw: Mapping[bytes | str, bytes | str]) -> AuditEntry:
        fields = {_text(k): _text(v) for k, v in raw.items()}
        return cls(entry_id=_text(entry_id), actor=fields.get("actor", ""), time_ms=int(fields.get("time_ms") or 0),
                   action=fields.get("action", ""), before=json.loads(fields.get("before") or "{}"),
                   after=json.loads(fields.get("after") or "{}"), reason=fields.get("reason", ""))


Mutation = Callable[[PointerState], PointerState]


class VersionPointers:
    """Reads and changes one model's pointers. `registry`, when given, vets every version pointed at."""

    def __init__(self, redis: AnyRedis, model: str, registry: ModelRegistry | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.redis = redis
        self.model = model
        self.registry = registry
        self.clock = clock
        self.key = versions_key(model)
        self.audit_key = versions_audit_stream(model)

    async def get(self) -> PointerState:
        return await read_pointers(self.redis, self.model)

    async def set_stable(self, version: str, actor: str, reason: str) -> PointerState:
        """Point stable at `version` (refused during a rollout); the one it replaces becomes `previous`."""
        self._check_registered(version)

        def change(before: PointerState) -> PointerState:
            if before.active:
                # Swapping stable under a running rollout would silently change what its gates compare against.
                raise PointerError(f"a rollout of {before.candidate} is in progress (state {before.state}, "
                                   f"{before.percent:g}%); promote it or roll it back first")
            if before.stable == version:
                return before
            previous = before.stable if before.stable is not None else before.previous
            return replace(before, stable=version, previous=previous, candidate=None, percent=0.0,
                           state=RolloutState.idle, stage=-1)

        state = await self._update("set-stable", actor, reason, change)
        await serve_model(self.redis, self.model, version, actor, reason)  # lifts a retirement of either
        return state

    async def set_candidate(self, version: str, actor: str, reason: str, *, plan: str | None = None) -> PointerState:
        """Start shadowing `version`: it gets no traffic yet (percent 0, stage -1)."""
        self._check_registered(version)

        def change(before: PointerState) -> PointerState:
            if before.stable is None:
                raise PointerError(f"{self.model} has no stable version; set one first (fleet models set-stable)")
            if version == before.stable:
                raise PointerError(f"{version} is already the stable version of {self.model}")
            if before.active:
                raise PointerError(f"{before.candidate} is already the candidate of {self.model} "
                                   f"(state {before.state}, {before.percent:g}%); roll it back or promote it first")
            return replace(before, candidate=version, percent=0.0, state=RolloutState.shadow, stage=-1, plan=plan)

        return await self._update("set-candidate", actor, reason, change)

    async def set_rollout(self, state: RolloutState, stage: int, percent: float, actor: str, reason: str, *,
                          expect_states: Collection[RolloutState] | None = None,
                          expect_candidate: str | None = None) -> PointerState:
        """Move the active rollout to `state` / `stage` / `percent`.

        `expect_*` make the write conditional: the controller uses them so that an operator's
        pause or rollback landing between its read and its write is never overwritten.
        """
        if not 0.0 <= percent <= 100.0:
            raise PointerError(f"percent must be within 0..100, not {percent}")
        if state not in ACTIVE_STATES:
            raise PointerError(f"set_rollout moves between {sorted(ACTIVE_STATES)}; use promote or rollback for {state}")

        def change(before: PointerState) -> PointerState:
            self._expect(before, expect_states, expect_candidate)
            if before.candidate is None:
                raise PointerError(f"{self.model} has no candidate version; start a rollout first")
            return replace(before, state=state, stage=stage, percent=percent)

        return await self._update(f"rollout-{state.value}", actor, reason, change)

    async def pause(self, actor: str, reason: str) -> PointerState:
        """Hold the rollout where it is: traffic split unchanged, the controller's stage clock stops."""

        def change(before: PointerState) -> PointerState:
            if not before.active or before.state == RolloutState.paused:
                raise PointerError(f"nothing to pause: {self.model} is {before.state}")
            return replace(before, state=RolloutState.paused)

        return await self._update("pause", actor, reason, change)

    async def resume(self, actor: str, reason: str) -> PointerState:
        def change(before: PointerState) -> PointerState:
            if before.state != RolloutState.paused:
                raise PointerError(f"nothing to resume: {self.model} is {before.state}, not paused")
            return replace(before, state=RolloutState.shadow if before.stage < 0 else RolloutState.canary)

        return await self._update("resume", actor, reason, change)

    async def promote(self, actor: str, reason: str, *, expect_candidate: str | None = None) -> PointerState:
        """The candidate becomes stable; the old stable is kept as `previous` for a later rollback."""

        def change(before: PointerState) -> PointerState:
            self._expect(before, None, expect_candidate)
            if before.candidate is None:
                raise PointerError(f"nothing to promote: {self.model} has no candidate")
            return replace(before, stable=before.candidate, previous=before.stable, candidate=None, percent=0.0,
                           state=RolloutState.promoted)

        return await self._update("promote", actor, reason, change)

    async def rollback(self, actor: str, reason: str, *, expect_candidate: str | None = None) -> PointerState:
        """All traffic back to stable at once; after a promotion, stable back to `previous`."""

        def change(before: PointerState) -> PointerState:
            self._expect(before, None, expect_candidate)
            if before.candidate is not None:
                return replace(before, candidate=None, percent=0.0, state=RolloutState.rolled_back)
            if before.state == RolloutState.promoted and before.previous is not None:
                # previous is spent: a second rollback must not flip back to the demoted version.
                return replace(before, stable=before.previous, previous=None, percent=0.0,
                               state=RolloutState.rolled_back)
            raise PointerError(f"nothing to roll back: {self.model} has no candidate"
                               + ("" if before.state != RolloutState.promoted else " and no previous stable"))

        return await self._update("rollback", actor, reason, change)

    async def log(self, action: str, actor: str, reason: str) -> None:
        """An audit entry for a change made elsewhere (a retirement in the catalogue), beside the pointers'."""
        state = await self.get()
        audit = _audit_fields(actor, int(self.clock() * 1000), action, state, state, reason)
        await self.redis.xadd(self.audit_key, audit, maxlen=AUDIT_MAXLEN, approximate=True)

    async def history(self, limit: int = 20) -> list[AuditEntry]:
        """The last `limit` changes, oldest first."""
        raw = await self.redis.xrevrange(self.audit_key, count=limit)
        return [AuditEntry.from_stream(entry_id, fields) for entry_id, fields in reversed(raw)]

    async def _update(self, action: str, actor: str, reason: str, mutate: Mutation) -> PointerState:
        """Apply `mutate` to the current state under WATCH; write hash + audit entry in one MULTI
        (on a cluster: the hash in the MULTI, the audit entry after it)."""
        audit_apart = is_cluster(self.redis)
        async with self.redis.pipeline(transaction=True) as pipe:
            for _ in range(_MAX_WATCH_RETRIES):
                try:
                    await pipe.watch(self.key)
                    raw = await pipe.hgetall(self.key)  # type: ignore[misc]
                    before = PointerState.from_hash(raw)
                    changed = mutate(before)
                    now_ms = int(self.clock() * 1000)
                    after = replace(changed, reason=reason, actor=actor, updated_ms=now_ms)
                    pipe.multi()
                    pipe.delete(self.key)
                    pipe.hset(self.key, mapping=after.to_hash())
                    audit = _audit_fields(actor, now_ms, action, before if raw else None, after, reason)
                    if not audit_apart:
                        pipe.xadd(self.audit_key, audit, maxlen=AUDIT_MAXLEN, approximate=True)
                    await pipe.execute()
                    if audit_apart:
                        await self.redis.xadd(self.audit_key, audit, maxlen=AUDIT_MAXLEN, approximate=True)
                    if after.stable is not None:
                        # Gateways serve what the catalogue lists (common/catalog.py); its own key, so a
                        # Redis Cluster writes it apart, after the pointers, as the audit entry.
                        await list_model(self.redis, self.model, actor, reason)
                    return after
                except WatchError:
                    continue
                finally:
                    await pipe.reset()
        raise PointerConflict(f"{self.key} kept changing under {action}; gave up after {_MAX_WATCH_RETRIES} tries")

    def _expect(self, before: PointerState, states: Collection[RolloutState] | None, candidate: str | None) -> None:
        if states is not None and before.state not in states:
            raise PointerConflict(f"{self.model} is {before.state}, expected one of {sorted(states)}")
        if candidate is not None and before.candidate != candidate:
            raise PointerConflict(f"{self.model}'s candidate is {before.candidate}, expected {candidate}")

    def _check_registered(self, version: str) -> None:
        if self.registry is not None:
            self.registry.resolve(self.model, version)  # raises ModelNotFound naming what exists


def _audit_fields(actor: str, now_ms: int, action: str, before: PointerState | None, after: PointerState,
                  reason: str) -> dict[Any, Any]:
    # `before` is None when the hash did not exist: logged as {} rather than as an invented idle state.
    before_fields = {} if before is None else before.to_hash()
    return {"actor": actor, "time_ms": str(now_ms), "action": action, "before": json.dumps(before_fields),
            "after": json.dumps(after.to_hash()), "reason": reason}
