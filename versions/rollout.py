"""The staged rollout controller: shadow, then each traffic stage, judged by the gates.

The controller holds no state that matters outside one `run`: everything it decides goes
into the version pointers (through `VersionPointers`, audited), and it re-reads them on every
poll, so an operator's pause, promote or rollback from the CLI wins at the next poll, and a
controller that died can be replaced by `fleet rollout run`, which picks up at the stage the
pointers name (that stage's window and clock start again).

Its writes are conditional on the state it read (`expect_*`): an operator's change that lands
between its read and its write makes the write fail with `PointerConflict`, and the next poll
sees the operator's change.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal


from common.redis_cluster import AnyRedis
from schemas.names import rollout_report_key
from models.registry import ModelRegistry
from versions.pointers import (
    ACTIVE_STATES,
    PointerConflict,
    PointerError,
    PointerState,
    RolloutState,
    VersionPointers,
)
from versions.rollout_gates import (
    Evaluation,
    RolloutPlan,
    Verdict,
    evaluate_shadow,
    evaluate_stage,
    pick_baseline,
    stage_label,
)
from versions.stats import StatsSnapshot, StatsWindow, VersionStats, read_shadow

log = logging.getLogger(__name__)

CONTROLLER_ACTOR = "rollout-controller"
Result = Literal["promoted", "rolled_back", "stopped"]



@dataclass(frozen=True)
class RolloutOutcome:
    result: Result
    version: str
    reason: str
    by_operator: bool
    stage: int
    percent: float


@dataclass(frozen=True)
class RolloutEvent:
    """What the controller saw or did at one poll; the CLI prints these as table rows."""

    kind: Literal["evaluation", "advanced", "paused", "done"]
    state: PointerState
    evaluation: Evaluation | None = None
    outcome: RolloutOutcome | None = None


@dataclass
class _Phase:
    """The stage being judged (-1: shadow), its counters at its start and its running time."""

    stage: int
    candidate_start: StatsSnapshot
    stable_start: StatsSnapshot
    elapsed_s: float = 0.0
    stable_window: StatsWindow | None = None


class RolloutController:
    def __init__(self, redis: AnyRedis, model: str, plan: RolloutPlan | None = None,
                 registry: ModelRegistry | None = None, *, actor: str = CONTROLLER_ACTOR,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 on_event: Callable[[RolloutEvent], None] | None = None) -> None:
        self.redis = redis
        self.model = model
        self.plan = plan
        self.pointers = VersionPointers(redis, model, registry)
        self.actor = actor
        self.clock = clock
        self.sleep = sleep
        self.on_event = on_event or (lambda event: None)

    async def start(self, version: str, actor: str, reason: str = "") -> PointerState:
        """Make `version` the candidate in shadow, with the plan stored so another process can drive it."""
        plan = self.plan or RolloutPlan()
        return await self.pointers.set_candidate(version, actor, reason or f"rollout of {version} started",
                                                 plan=plan.model_dump_json())

    async def run(self, poll_s: float = 1.0) -> RolloutOutcome:
        """Drive the active rollout to promoted or rolled back (or until someone else ends it)."""
        state = await self.pointers.get()
        if not state.active or state.candidate is None:
            raise PointerError(f"no rollout in progress for {self.model} (state {state.state}); "
                               "start one with `fleet rollout start`")
        version = state.candidate
        plan = self.plan or (RolloutPlan.model_validate_json(state.plan) if state.plan else RolloutPlan())
        phase = await self._new_phase(state.stage, version, state.stable)
        carried: StatsWindow | None = None
        last_tick = self.clock()
        announced_pause = False
        while True:
            state = await self.pointers.get()
            now = self.clock()
            ended = _ended(state, version)
            if ended is not None:
                return await self._finish(state, ended)
            if state.state != RolloutState.paused:
                phase.elapsed_s += now - last_tick  # a paused rollout's clock stands still
            last_tick = now
            if state.stage != phase.stage:  # moved by someone else: judge the new stage from its start
                carried = _carry(phase, carried, plan)
                phase = await self._new_phase(state.stage, version, state.stable)
            if state.state == RolloutState.paused:
                if not announced_pause:
                    self.on_event(RolloutEvent("paused", state))
                announced_pause = True
                await self.sleep(poll_s)
                continue
            announced_pause = False
            evaluation = await self._evaluate(plan, phase, version, state, carried)
            await self._report(state, evaluation, ttl_s=max(30.0, 3 * poll_s))
            self.on_event(RolloutEvent("evaluation", state, evaluation))
            try:
                if evaluation.verdict == Verdict.breach:
                    after = await self.pointers.rollback(self.actor, f"automatic rollback: {evaluation.reason}",
                                                         expect_candidate=version)
                    return await self._finish(after, RolloutOutcome("rolled_back", version, evaluation.reason,
                                                                    False, state.stage, state.percent))
                if evaluation.verdict == Verdict.passed:
                    done = await self._advance(plan, state, version, evaluation)
                    if done is not None:
                        return done
                    carried = _carry(phase, carried, plan)
                    phase = await self._new_phase(phase.stage + 1, version, state.stable)
            except PointerConflict as conflict:
                log.info("pointers of %s changed under the controller (%s); re-reading", self.model, conflict)
                continue
            await self.sleep(poll_s)

    async def _advance(self, plan: RolloutPlan, state: PointerState, version: str,
                       evaluation: Evaluation) -> RolloutOutcome | None:
        """Next stage, or promotion after the last one; the outcome when the rollout is over."""
        passed = f"{stage_label(plan.percent_of(state.stage) if state.stage >= 0 else None)} passed: {evaluation.reason}"
        if state.stage >= len(plan.stages) - 1:
            after = await self.pointers.promote(self.actor, f"{passed}; promoted", expect_candidate=version)
            return await self._finish(after, RolloutOutcome("promoted", version, passed, False, state.stage, 100.0))
        stage = state.stage + 1
        percent = plan.stages[stage]
        expected = {RolloutState.shadow} if state.stage < 0 else {RolloutState.canary}
        after = await self.pointers.set_rollout(RolloutState.canary, stage, percent, self.actor,
                                                f"{passed}; now {percent:g}%", expect_states=expected,
                                                expect_candidate=version)
        self.on_event(RolloutEvent("advanced", after, evaluation))
        return None

    async def _evaluate(self, plan: RolloutPlan, phase: _Phase, version: str, state: PointerState,
                        carried: StatsWindow | None) -> Evaluation:
        shadow = await read_shadow(self.redis, self.model, version)
        if phase.stage < 0:
            if state.stable is not None:  # stable takes all traffic now: its figures are the baseline to come
                phase.stable_window = (await self._snapshot(state.stable)).since(phase.stable_start)
            return evaluate_shadow(plan, elapsed_s=phase.elapsed_s, shadow=shadow)
        candidate = (await self._snapshot(version)).since(phase.candidate_start)
        stable: StatsWindow | None = None
        if state.stable is not None:
            phase.stable_window = (await self._snapshot(state.stable)).since(phase.stable_start)
            stable = pick_baseline(phase.stable_window, carried, plan.min_stage_requests)
        return evaluate_stage(plan, percent=plan.percent_of(phase.stage), elapsed_s=phase.elapsed_s,
                              candidate=candidate, stable=stable, shadow=shadow)

    async def _new_phase(self, stage: int, version: str, stable: str | None) -> _Phase:
        stable_start = await self._snapshot(stable) if stable is not None else StatsSnapshot.empty(self.clock())
        return _Phase(stage, await self._snapshot(version), stable_start)

    async def _snapshot(self, version: str) -> StatsSnapshot:
        return await VersionStats.snapshot(self.redis, self.model, version, now_s=self.clock())

    async def _report(self, state: PointerState, evaluation: Evaluation, ttl_s: float) -> None:
        report: dict[str, Any] = {
            "time_ms": int(time.time() * 1000), "candidate": state.candidate, "stable": state.stable,
            "state": state.state.value, "stage": state.stage, "percent": state.percent,
            "verdict": evaluation.verdict.value, "reason": evaluation.reason, "figures": evaluation.figures,
            "checks": [{"gate": c.gate, "verdict": c.verdict.value, "detail": c.detail} for c in evaluation.checks],
        }
        await self.redis.set(rollout_report_key(self.model), json.dumps(report), px=int(ttl_s * 1000))

    async def _finish(self, state: PointerState, outcome: RolloutOutcome) -> RolloutOutcome:
        await self.redis.delete(rollout_report_key(self.model))
        self.on_event(RolloutEvent("done", state, outcome=outcome))
        return outcome


def _carry(phase: _Phase, carried: StatsWindow | None, plan: RolloutPlan) -> StatsWindow | None:
    """Keep the ending phase's stable window as the baseline when it saw enough traffic."""
    window = phase.stable_window
    return window if window is not None and window.requests >= plan.min_stage_requests else carried


def _ended(state: PointerState, version: str) -> RolloutOutcome | None:
    """The outcome when the pointers say someone else ended this rollout; None while it runs."""
    if state.candidate == version and state.state in ACTIVE_STATES:
        return None
    by = f"{state.actor}: {state.reason}" if state.reason else state.actor
    if state.state == RolloutState.promoted and state.stable == version:
        return RolloutOutcome("promoted", version, f"promoted by {by}", True, state.stage, 100.0)
    if state.state == RolloutState.rolled_back:
        return RolloutOutcome("rolled_back", version, f"rolled back by {by}", True, state.stage, 0.0)
    return RolloutOutcome("stopped", version, f"pointers changed by {by} (state {state.state}, candidate "
                          f"{state.candidate})", True, state.stage, state.percent)


async def read_report(redis: AnyRedis, model: str) -> dict[str, Any] | None:
    """The running controller's latest evaluation, or None when no controller reported lately."""
    raw = await redis.get(rollout_report_key(model))
    return None if raw is None else dict(json.loads(raw))
