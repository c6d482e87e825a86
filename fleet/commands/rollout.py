"""`fleet rollout`: take a candidate version through shadow and traffic stages, gated; or stop it.

    fleet rollout start MODEL VERSION [--stages 1,5,20,50,100] [--min-stage-s N] [--shadow-min-s N] [--detach]
    fleet rollout run MODEL          drive a started rollout (after --detach, or when a controller died)
    fleet rollout status MODEL       state, stage, percent, gate figures, last changes
    fleet rollout advance MODEL      the next traffic stage now (gates not awaited)
    fleet rollout promote MODEL      the candidate becomes stable now
    fleet rollout pause MODEL        hold the traffic split; the stage clock stops
    fleet rollout resume MODEL
    fleet rollout rollback MODEL [--reason TEXT]   all traffic back to stable (after a promotion: to the previous)

Without --detach, `start` runs the controller in the foreground and prints a row per gate
evaluation (when the verdict or stage changes, and every --print-every-s). Interrupting it
leaves the rollout where it is; `fleet rollout run MODEL` picks it up. Defaults come from
FLEET_ROLLOUT_* (e.g. FLEET_ROLLOUT_MIN_STAGE_S).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections.abc import Sequence
from typing import Any


from common.redis_cluster import AnyRedis
from fleet.arguments import command_parser, default_actor
from fleet.commands.models import format_ms, history_rows
from fleet.commands.redis_access import with_redis
from fleet.exits import Exit
from fleet.tables import format_pairs, format_table
from models import ModelRegistry, RegistryError
from versions import (PointerError, PointerState, RolloutController, RolloutEvent, RolloutOutcome, RolloutPlan,
                      RolloutSettings, RolloutState, StatsWindow, VersionPointers, VersionStats, parse_stages,
                      read_report, read_shadow, stage_label)

ROW_HEADERS = ("time", "phase", "elapsed", "cand req", "cand err", "cand p99", "stable err", "stable p99",
               "agreement", "verdict", "detail")
ROW_WIDTHS = (8, 12, 8, 8, 8, 8, 10, 10, 9, 11)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _ms(value: float | None) -> str:
    return "-" if value is None else ("+inf" if math.isinf(value) else f"{value:g}ms")


def _phase(state: PointerState) -> str:
    if not state.active:
        return "-"
    return stage_label(None if state.stage < 0 else state.percent)


def event_row(event: RolloutEvent) -> tuple[str, ...]:
    """One table row for a controller event."""
    now = time.strftime("%H:%M:%S")
    if event.kind == "paused":
        return (now, _phase(event.state), "-", "", "", "", "", "", "", "paused", event.state.reason)
    if event.kind == "done" and event.outcome is not None:
        return (now, _phase(event.state), "-", "", "", "", "", "", "", event.outcome.result, event.outcome.reason)
    evaluation = event.evaluation
    assert evaluation is not None
    fig = evaluation.figures
    verdict = "advance" if event.kind == "advanced" else evaluation.verdict.value
    requests = fig.get("candidate_requests")
    return (now, _phase(event.state) if event.kind != "advanced" else f"-> {event.state.percent:g}%",
            f"{fig.get('elapsed_s') or 0:.1f}s", "-" if requests is None else str(int(requests)),
            _pct(fig.get("candidate_error_rate")), _ms(fig.get("candidate_p99_ms")),
            _pct(fig.get("stable_error_rate")), _ms(fig.get("stable_p99_ms")), _pct(fig.get("agreement")),
            verdict, evaluation.reason)


class RowPrinter:
    """Prints controller events as table rows without flooding: changes always, the same verdict
    again only every `every_s`."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.last_key: tuple[str, ...] = ()
        self.last_time = 0.0
        print(self._line(ROW_HEADERS), flush=True)

    @staticmethod
    def _line(cells: Sequence[str]) -> str:
        # Fixed widths so rows printed over minutes line up; the last column (detail) is free.
        return "  ".join(c.ljust(w) for c, w in zip(cells[:-1], ROW_WIDTHS, strict=True)) + "  " + cells[-1]

    def __call__(self, event: RolloutEvent) -> None:
        row = event_row(event)
        key = (event.kind, row[1], row[9], row[10].split(":")[0])
        now = time.monotonic()
        if event.kind == "evaluation" and key == self.last_key and now - self.last_time < self.every_s:
            return
        self.last_key, self.last_time = key, now
        print(self._line(row), flush=True)


def outcome_code(outcome: RolloutOutcome) -> int:
    return Exit.OK if outcome.result == "promoted" else Exit.ROLLED_BACK


async def drive(controller: RolloutController, model: str, poll_s: float) -> int:
    try:
        outcome = await controller.run(poll_s=poll_s)
    except asyncio.CancelledError:
        print(f"controller stopped; the rollout stays where it is: `fleet rollout run {model}` drives it on, "
              f"`fleet rollout status {model}` shows it", file=sys.stderr)
        raise
    print(f"{model}: {outcome.version} {outcome.result.replace('_', ' ')}: {outcome.reason}")
    return outcome_code(outcome)


async def _start(redis: AnyRedis, settings: RolloutSettings, registry: ModelRegistry, args: Any) -> int:
    plan = settings.plan(stages=parse_stages(args.stages) if args.stages else None, min_stage_s=args.min_stage_s,
                         shadow_min_s=args.shadow_min_s, shadow_min_compared=args.shadow_min_compared)
    printer = None if args.detach else RowPrinter(args.print_every_s)
    controller = RolloutController(redis, args.model, plan, registry, on_event=printer)
    state = await controller.start(args.version, args.actor or default_actor(), args.reason or "")
    stages = " -> ".join(f"{s:g}%" for s in plan.stages)
    print(f"{args.model}: {state.candidate} is the candidate (shadow first), stable {state.stable}; "
          f"stages {stages}, {plan.min_stage_s:g}s each", file=sys.stderr)
    if args.detach:
        print(f"detached: `fleet rollout run {args.model}` drives it, `fleet rollout status {args.model}` shows it")
        return Exit.OK
    return await drive(controller, args.model, args.poll_s or settings.rollout_poll_s)


async def _run(redis: AnyRedis, settings: RolloutSettings, registry: ModelRegistry, args: Any) -> int:
    controller = RolloutController(redis, args.model, None, registry, on_event=RowPrinter(args.print_every_s))
    return await drive(controller, args.model, args.poll_s or settings.rollout_poll_s)


def _window_row(name: str, version: str | None, window: StatsWindow | None) -> tuple[str, ...]:
    if version is None or window is None:
        return (name, "-", "", "", "")
    return (name, version, str(window.requests), _pct(window.error_rate), _ms(window.p99_ms))


async def _status(redis: AnyRedis, settings: RolloutSettings, registry: ModelRegistry, args: Any) -> int:
    pointers = VersionPointers(redis, args.model)
    state = await pointers.get()
    position = "-" if not state.active else \
        f"{_phase(state)} (stage index {state.stage}), {state.percent:g}% of unpinned traffic to candidate"
    lines = [("model", args.model), ("state", str(state.state)), ("position", position),
             ("stable", state.stable or "-"), ("candidate", state.candidate or "-"),
             ("previous", state.previous or "-"),
             ("last change", f"{format_ms(state.updated_ms)} by {state.actor}: {state.reason}"
                             if state.updated_ms else "never (no pointer set yet: workers serve their configured version)")]
    print(format_pairs(lines))
    report = await read_report(redis, args.model)
    if report is not None:
        age_s = max(0.0, time.time() - report["time_ms"] / 1000)
        print(f"\ncontroller: {report['verdict']} ({age_s:.1f}s ago): {report['reason']}")
        print(format_table(("gate", "verdict", "detail"),
                           [(c["gate"], c["verdict"], c["detail"]) for c in report["checks"]]))
    elif state.active:
        print("\ncontroller: no report in the last 30s; is one running? (`fleet rollout run "
              f"{args.model}`). Cumulative counters since they began:")
    if state.stable is not None:
        rows = [_window_row("stable", state.stable,
                            (await VersionStats.snapshot(redis, args.model, state.stable)).total())]
        if state.candidate is not None:
            rows.append(_window_row("candidate", state.candidate,
                                    (await VersionStats.snapshot(redis, args.model, state.candidate)).total()))
            shadow = await read_shadow(redis, args.model, state.candidate)
            cosine = "" if shadow.mean_cosine is None else f", mean cosine {shadow.mean_cosine:.4f}"
            delta = "" if shadow.latency_delta_ms is None else f", shadow - live latency {shadow.latency_delta_ms:+.1f} ms"
            print(f"\nshadow: {shadow.compared} compared, agreement {_pct(shadow.agreement)}{cosine}, "
                  f"{shadow.errors} candidate errors{delta}")
        print("\n" + format_table(("version", "id", "requests (total)", "error rate", "p99"), rows))
    entries = await pointers.history(args.limit)
    if entries:
        print("\n" + format_table(("time", "actor", "action", "change", "reason"), history_rows(entries)))
    return Exit.OK


OPERATOR_ACTIONS = ("advance", "promote", "pause", "resume", "rollback")


async def advance(pointers: VersionPointers, settings: RolloutSettings, actor: str, reason: str) -> PointerState:
    """The candidate's next traffic stage now, without waiting for the gates (from shadow: the first
    stage; from the last stage: promotion). The stages are the rollout's own stored plan."""
    state = await pointers.get()
    if not state.active or state.candidate is None:
        raise PointerError(f"{pointers.model} has no active rollout to advance")
    if state.state == RolloutState.paused:
        raise PointerError(f"the rollout of {state.candidate} is paused; resume it first")
    plan = RolloutPlan.model_validate_json(state.plan) if state.plan else settings.plan()
    stage = state.stage + 1
    if stage >= len(plan.stages):
        return await pointers.promote(actor, reason, expect_candidate=state.candidate)
    return await pointers.set_rollout(RolloutState.canary, stage, plan.percent_of(stage), actor, reason,
                                      expect_candidate=state.candidate)


async def operator_action(redis: AnyRedis, registry: ModelRegistry, model: str, action: str, actor: str,
                          reason: str) -> PointerState:
    """One audited hand on the rollout (`fleet rollout <action>` and the console's buttons)."""
    pointers = VersionPointers(redis, model, registry)
    if action == "advance":
        return await advance(pointers, RolloutSettings(), actor, reason)
    change = {"promote": pointers.promote, "pause": pointers.pause, "resume": pointers.resume,
              "rollback": pointers.rollback}[action]
    return await change(actor, reason)


async def start_rollout(redis: AnyRedis, registry: ModelRegistry, model: str, version: str, actor: str,
                        reason: str, plan: RolloutPlan | None = None) -> PointerState:
    """Make `version` the candidate in shadow, detached (`fleet rollout start --detach`, the console)."""
    controller = RolloutController(redis, model, plan or RolloutSettings().plan(), registry)
    return await controller.start(version, actor, reason)


async def _operator(redis: AnyRedis, settings: RolloutSettings, registry: ModelRegistry, args: Any) -> int:
    reason = args.reason or f"{args.command} by hand"
    state = await operator_action(redis, registry, args.model, args.command, args.actor or default_actor(), reason)
    print(f"{args.model}: {state.state}; stable {state.stable}, candidate {state.candidate or '-'} "
          f"at {state.percent:g}%")
    return Exit.OK


def _parser() -> argparse.ArgumentParser:
    parser = command_parser("rollout", __doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=text)
        sub.add_argument("model")
        sub.add_argument("--actor", default=None, help="who to log; default $USER@host")
        sub.add_argument("--reason", default=None)
        return sub

    start = command("start", "make VERSION the candidate and take it through the stages")
    start.add_argument("version")
    start.add_argument("--stages", help="comma-separated percentages ending at 100, e.g. 1,5,20,50,100")
    start.add_argument("--min-stage-s", type=float)
    start.add_argument("--shadow-min-s", type=float)
    start.add_argument("--shadow-min-compared", type=int)
    start.add_argument("--detach", action="store_true", help="only start; `fleet rollout run` drives it")
    for sub in (start, command("run", "drive a started rollout to its end")):
        sub.add_argument("--poll-s", type=float, help="how often to read pointers and stats")
        sub.add_argument("--print-every-s", type=float, default=10.0, help="repeat an unchanged row this often")
    command("status", "where the rollout stands").add_argument("--limit", type=int, default=5)
    for name, text in (("advance", "the next traffic stage now, without waiting for the gates"),
                       ("promote", "the candidate becomes stable now"), ("pause", "hold the traffic split"),
                       ("resume", "continue a paused rollout"), ("rollback", "all traffic back to stable now")):
        command(name, text)
    return parser


HANDLERS = {"start": _start, "run": _run, "status": _status}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = RolloutSettings()
    registry = ModelRegistry(settings.registry_dir)
    handler = HANDLERS.get(args.command, _operator)
    try:
        return asyncio.run(with_redis(settings, lambda redis: handler(redis, settings, registry, args)))
    except (RegistryError, PointerError, ValueError) as exc:
        print(f"fleet rollout {args.command}: {exc}", file=sys.stderr)
        return Exit.FAILED
    except KeyboardInterrupt:
        return Exit.INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
