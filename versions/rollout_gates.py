"""The rollout plan and its gates, as pure functions of the figures (no I/O, no clock).

A gate answers pass, wait (not enough data or time yet) or breach. A stage passes when its
minimum time is up and every gate passes; it fails as soon as any gate breaches, even
before its time is up, so a broken candidate is rolled back at the first poll that proves it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from common.settings import FleetSettings
from versions.stats import ShadowSnapshot, StatsWindow

DEFAULT_STAGES = (1.0, 5.0, 20.0, 50.0, 100.0)


class RolloutPlan(BaseModel):
    """Stages and gate thresholds of one rollout (seed §3.3: shadow, then 1 -> 5 -> 20 -> 50 -> 100%)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stages: tuple[float, ...] = Field(DEFAULT_STAGES, description="Candidate traffic percentages, ending at 100")
    min_stage_s: float = Field(300.0, ge=0, description="Least time a stage runs before it may pass")
    shadow_min_s: float = Field(300.0, ge=0, description="Least time in shadow before the first stage")
    shadow_min_compared: int = Field(200, ge=0, description="Shadow comparisons needed to judge agreement; "
                                     "0 lets a rollout without shadow consumers pass the shadow gate")
    min_agreement: float = Field(0.99, ge=0, le=1, description="Least shadow agreement (agreed / compared) of a "
                                 "classifier: labels that match")
    min_mean_cosine: float = Field(0.99, ge=-1, le=1, description="Least mean cosine between candidate and live "
                                   "embeddings: an embedding model's agreement gate (INT8 rows differ a little "
                                   "everywhere, so per-request agreement would refuse every quantised build)")
    max_error_rate: float = Field(0.01, ge=0, le=1, description="Candidate error rate always allowed")
    max_error_rate_ratio: float = Field(2.0, ge=1, description="Candidate error rate allowed as a multiple of "
                                        "stable's, when that is above max_error_rate")
    max_p99_ratio: float = Field(1.5, ge=1, description="Largest candidate p99 as a multiple of stable's")
    min_stage_requests: int = Field(100, ge=1, description="Requests per version before error rate and p99 are judged")

    @field_validator("stages")
    @classmethod
    def _increasing_to_100(cls, stages: tuple[float, ...]) -> tuple[float, ...]:
        if not stages or stages[-1] != 100:
            raise ValueError(f"stages must end at 100, got {list(stages)}")
        if any(not 0 < s <= 100 for s in stages) or any(b <= a for a, b in zip(stages, stages[1:])):
            raise ValueError(f"stages must increase strictly within (0, 100], got {list(stages)}")
        return stages

    def percent_of(self, stage: int) -> float:
        return 0.0 if stage < 0 else self.stages[min(stage, len(self.stages) - 1)]


def parse_stages(text: str) -> tuple[float, ...]:
    """`1,5,20,50,100` -> (1.0, 5.0, 20.0, 50.0, 100.0)."""
    return tuple(float(part) for part in text.replace(" ", "").split(",") if part)


class RolloutSettings(FleetSettings):
    """Rollout defaults from FLEET_ROLLOUT_* (e.g. FLEET_ROLLOUT_STAGES=1,5,20,50,100)."""

    rollout_stages: Annotated[tuple[float, ...], NoDecode] = DEFAULT_STAGES
    rollout_min_stage_s: float = 300.0
    rollout_shadow_min_s: float = 300.0
    rollout_shadow_min_compared: int = 200
    rollout_min_agreement: float = 0.99
    rollout_min_mean_cosine: float = 0.99
    rollout_max_error_rate: float = 0.01
    rollout_max_error_rate_ratio: float = 2.0
    rollout_max_p99_ratio: float = 1.5
    rollout_min_stage_requests: int = 100
    rollout_poll_s: float = Field(1.0, gt=0, description="How often the controller reads pointers and stats")

    @field_validator("rollout_stages", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        return parse_stages(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _valid_plan(self) -> Self:
        self.plan()
        return self

    def plan(self, **overrides: object) -> RolloutPlan:
        prefix = "rollout_"
        values = {name[len(prefix):]: getattr(self, name) for name in type(self).model_fields
                  if name.startswith(prefix) and name != "rollout_poll_s"}
        return RolloutPlan.model_validate(values | {k: v for k, v in overrides.items() if v is not None})


class Verdict(StrEnum):
    passed = "pass"
    wait = "wait"
    breach = "breach"


@dataclass(frozen=True)
class GateCheck:
    gate: str  # error_rate | p99 | agreement | time
    verdict: Verdict
    detail: str


@dataclass(frozen=True)
class Evaluation:
    """One look at the gates: the overall verdict, each gate's, and the figures behind them."""

    verdict: Verdict
    checks: tuple[GateCheck, ...]
    figures: dict[str, float | None] = field(default_factory=dict)

    @property
    def reason(self) -> str:
        """The first breach, else the first wait, else a summary of the passes."""
        for wanted in (Verdict.breach, Verdict.wait):
            for check in self.checks:
                if check.verdict == wanted:
                    return f"{check.gate} gate: {check.detail}"
        return "; ".join(check.detail for check in self.checks)


def _pct(rate: float) -> str:
    return f"{rate * 100:.1f}%"


def _ms(value: float) -> str:
    return "+inf ms" if math.isinf(value) else f"{value:g} ms"


def stage_label(percent: float | None) -> str:
    return "shadow" if percent is None else f"stage {percent:g}%"


def _overall(checks: tuple[GateCheck, ...]) -> Verdict:
    verdicts = {check.verdict for check in checks}
    if Verdict.breach in verdicts:
        return Verdict.breach
    return Verdict.wait if Verdict.wait in verdicts else Verdict.passed


def check_time(elapsed_s: float, min_s: float) -> GateCheck:
    if elapsed_s < min_s:
        return GateCheck("time", Verdict.wait, f"{elapsed_s:.1f}s of {min_s:g}s")
    return GateCheck("time", Verdict.passed, f"{elapsed_s:.1f}s >= {min_s:g}s")


def check_agreement(plan: RolloutPlan, shadow: ShadowSnapshot, where: str) -> GateCheck:
    if shadow.compared == 0 and plan.shadow_min_compared == 0:
        return GateCheck("agreement", Verdict.passed, "no shadow comparisons (none required)")
    if shadow.compared < max(1, plan.shadow_min_compared):
        return GateCheck("agreement", Verdict.wait, f"{shadow.compared}/{plan.shadow_min_compared} compared")
    if shadow.mean_cosine is not None:
        figures = f"shadow mean cosine {shadow.mean_cosine:.4f}"
        if shadow.mean_cosine < plan.min_mean_cosine:
            return GateCheck("agreement", Verdict.breach, f"{figures} < {plan.min_mean_cosine:.4f} "
                             f"over {shadow.compared} compared at {where}")
        return GateCheck("agreement", Verdict.passed, f"{figures} >= {plan.min_mean_cosine:.4f}")
    agreement = shadow.agreement or 0.0
    figures = f"shadow agreement {_pct(agreement)}"
    if agreement < plan.min_agreement:
        return GateCheck("agreement", Verdict.breach, f"{figures} < {_pct(plan.min_agreement)} "
                         f"over {shadow.compared} compared at {where}")
    return GateCheck("agreement", Verdict.passed, f"{figures} >= {_pct(plan.min_agreement)}")


def check_shadow_errors(plan: RolloutPlan, shadow: ShadowSnapshot) -> GateCheck:
    """Requests the candidate failed on in shadow never reach `compared`: judged here, or a candidate
    that fails everything would wait in shadow for ever instead of being rolled back."""
    attempts = shadow.compared + shadow.errors
    rate = shadow.error_rate or 0.0
    if attempts < max(1, plan.shadow_min_compared):
        return GateCheck("shadow_errors", Verdict.wait if shadow.errors else Verdict.passed,
                         f"{shadow.errors} errors in {attempts} shadowed")
    if rate > plan.max_error_rate:
        return GateCheck("shadow_errors", Verdict.breach, f"shadow error rate {_pct(rate)} > "
                         f"{_pct(plan.max_error_rate)} over {attempts} shadowed at shadow")
    return GateCheck("shadow_errors", Verdict.passed, f"shadow error rate {_pct(rate)} <= {_pct(plan.max_error_rate)}")


def check_error_rate(plan: RolloutPlan, candidate: StatsWindow, stable: StatsWindow | None, where: str) -> GateCheck:
    if candidate.requests < plan.min_stage_requests:
        return GateCheck("error_rate", Verdict.wait, f"{candidate.requests}/{plan.min_stage_requests} candidate requests")
    stable_rate = stable.error_rate if stable is not None else None
    allowed = max(plan.max_error_rate, plan.max_error_rate_ratio * (stable_rate or 0.0))
    stable_text = "no stable baseline" if stable_rate is None else f"stable {_pct(stable_rate)}"
    figures = f"error rate {_pct(candidate.error_rate)}"
    if candidate.error_rate > allowed:
        return GateCheck("error_rate", Verdict.breach, f"{figures} > {_pct(allowed)} ({stable_text}) at {where}")
    return GateCheck("error_rate", Verdict.passed, f"{figures} <= {_pct(allowed)} ({stable_text})")


def check_p99(plan: RolloutPlan, candidate: StatsWindow, stable: StatsWindow | None, where: str) -> GateCheck:
    candidate_p99 = candidate.p99_ms
    if candidate.requests < plan.min_stage_requests or candidate_p99 is None:
        return GateCheck("p99", Verdict.wait, f"{candidate.requests}/{plan.min_stage_requests} candidate requests")
    stable_p99 = stable.p99_ms if stable is not None else None
    if stable_p99 is None:
        return GateCheck("p99", Verdict.wait, "no stable latency baseline yet")
    figures = f"p99 {_ms(candidate_p99)}"
    limit = plan.max_p99_ratio * stable_p99
    if candidate_p99 > limit:
        return GateCheck("p99", Verdict.breach, f"{figures} > {plan.max_p99_ratio:g} x stable p99 "
                         f"{_ms(stable_p99)} at {where}")
    return GateCheck("p99", Verdict.passed, f"{figures} <= {plan.max_p99_ratio:g} x stable {_ms(stable_p99)}")


def evaluate_shadow(plan: RolloutPlan, *, elapsed_s: float, shadow: ShadowSnapshot) -> Evaluation:
    """The shadow phase: few candidate failures, enough comparisons that agree, for at least `shadow_min_s`."""
    checks = (check_shadow_errors(plan, shadow), check_agreement(plan, shadow, "shadow"),
              check_time(elapsed_s, plan.shadow_min_s))
    return Evaluation(_overall(checks), checks, _shadow_figures(shadow) | {"elapsed_s": elapsed_s})


def evaluate_stage(plan: RolloutPlan, *, percent: float, elapsed_s: float, candidate: StatsWindow,
                   stable: StatsWindow | None, shadow: ShadowSnapshot) -> Evaluation:
    """A canary stage: error rate and p99 against stable (see `pick_baseline`), agreement, time."""
    where = stage_label(percent)
    checks = (check_error_rate(plan, candidate, stable, where), check_p99(plan, candidate, stable, where),
              check_agreement(plan, shadow, where), check_time(elapsed_s, plan.min_stage_s))
    figures: dict[str, float | None] = {
        "percent": percent, "elapsed_s": elapsed_s,
        "candidate_requests": float(candidate.requests), "candidate_error_rate": candidate.error_rate,
        "candidate_p99_ms": candidate.p99_ms,
        "stable_requests": None if stable is None else float(stable.requests),
        "stable_error_rate": None if stable is None else stable.error_rate,
        "stable_p99_ms": None if stable is None else stable.p99_ms,
    }
    return Evaluation(_overall(checks), checks, figures | _shadow_figures(shadow))


def pick_baseline(current: StatsWindow, carried: StatsWindow | None, min_requests: int) -> StatsWindow | None:
    """Stable's window to judge against: this stage's when it has enough requests, else the last
    one that had (at 100% stable gets no unpinned traffic, so its figures from earlier stages,
    or from the shadow phase, stand in)."""
    return current if current.requests >= min_requests else carried


def _shadow_figures(shadow: ShadowSnapshot) -> dict[str, float | None]:
    return {"compared": float(shadow.compared), "agreement": shadow.agreement, "mean_cosine": shadow.mean_cosine}
