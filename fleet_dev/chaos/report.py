"""One row per scenario: what was sent, answered, lost, duplicated, dead-lettered, which 5xx and
worker exits it cost, and how soon the gateway and the throughput came back; the verdict that
decides the exit status; the tables and the JSON document."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fleet_dev.chaos.ledger import Ledger
from fleet.tables import format_table

HEADERS = ("scenario", "sent", "accepted", "answered", "lost", "dup", "dead letters", "5xx", "5xx input",
           "restarts", "exits", "gateway back", "throughput back")
REDIS_RECOVERY_LIMIT_S = 5.0  # issue 12: the gateway answers again within 5 s of Redis returning
MALFORMED_SCENARIOS = frozenset({"flood", "http"})
REDIS_SCENARIOS = frozenset({"redis-restart", "redis-pause"})
LOST_IDS_KEPT = 20
EXITS_SHOWN = 6
TAILS_SHOWN = 2


@dataclass
class WorkerExit:
    worker: str
    code: int | None
    at_s: float  # seconds into the scenario
    planned: bool  # killed by the scenario itself
    log_tail: str = ""


@dataclass
class ScenarioReport:
    name: str
    sent: int = 0
    accepted: int = 0
    answered: int = 0
    lost: int = 0
    duplicated: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    dead_letters: dict[str, int] = field(default_factory=dict)  # DLQ records by `code`
    dead_letters_expected: int | None = None
    malformed_sent: dict[str, int] = field(default_factory=dict)
    http_5xx: int = 0  # every 5xx the gateway answered during the scenario (503 in an outage is fine)
    http_5xx_input: int = 0  # 5xx answered to malformed input: always a bug
    http_unexpected: dict[str, int] = field(default_factory=dict)  # malformed kind -> answers not of the owed class
    worker_restarts: int = 0
    worker_exits: list[WorkerExit] = field(default_factory=list)
    gateway_recovery_s: float | None = None
    throughput_back_s: float | None = None
    baseline_per_s: float = 0.0
    lost_ids: list[str] = field(default_factory=list)
    lost_paths: dict[str, int] = field(default_factory=dict)  # the load's path (http-infer, pipeline...) -> lost
    checks: dict[str, bool] = field(default_factory=dict)  # scenario-specific yes/no checks, e.g. a node rejoined
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    def take_ledger(self, ledger: Ledger) -> None:
        self.sent, self.accepted = ledger.sent, len(ledger.accepted)
        self.answered, self.lost, self.duplicated = ledger.answered, ledger.lost, ledger.duplicated
        self.statuses = dict(ledger.statuses())
        self.refused = dict(ledger.refused)
        self.http_5xx += ledger.http_5xx
        self.lost_ids = ledger.unanswered()[:LOST_IDS_KEPT]
        self.lost_paths = dict(ledger.lost_by_path())

    @property
    def unplanned_exits(self) -> list[WorkerExit]:
        return [died for died in self.worker_exits if not died.planned]


def failures(report: ScenarioReport) -> list[str]:
    """Why this scenario fails the run; empty when it passes."""
    found = []
    if report.lost:
        paths = ", ".join(f"{path} {count}" for path, count in sorted(report.lost_paths.items()))
        found.append(f"{report.name}: {report.lost} accepted requests lost ({paths}; e.g. "
                     f"{', '.join(report.lost_ids[:3])})")
    exits = report.unplanned_exits
    if exits and report.name in MALFORMED_SCENARIOS:
        found.append(f"{report.name}: {len(exits)} worker exits on malformed input")
    elif exits:
        found.append(f"{report.name}: {len(exits)} worker exits (an outage must be waited out, never fatal)")
    if report.http_5xx_input:
        found.append(f"{report.name}: {report.http_5xx_input} HTTP 5xx answers to malformed input")
    if report.name in REDIS_SCENARIOS and (report.gateway_recovery_s is None
                                           or report.gateway_recovery_s > REDIS_RECOVERY_LIMIT_S):
        shown = "never" if report.gateway_recovery_s is None else f"after {report.gateway_recovery_s:.1f} s"
        found.append(f"{report.name}: the gateway answered again {shown} (limit {REDIS_RECOVERY_LIMIT_S:g} s)")
    found += [f"{report.name}: {check}: no" for check, passed in report.checks.items() if not passed]
    return found


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def row(report: ScenarioReport) -> list[str]:
    dead = sum(report.dead_letters.values())
    expected = "" if report.dead_letters_expected is None else f"/{report.dead_letters_expected:,}"
    return [report.name, f"{report.sent:,}", f"{report.accepted:,}", f"{report.answered:,}", f"{report.lost:,}",
            f"{report.duplicated:,}", f"{dead:,}{expected}", str(report.http_5xx), str(report.http_5xx_input),
            str(report.worker_restarts), str(len(report.unplanned_exits)), _seconds(report.gateway_recovery_s),
            _seconds(report.throughput_back_s)]


def scenario_table(reports: list[ScenarioReport]) -> str:
    right = [header for header in HEADERS if header != "scenario"]
    return format_table(HEADERS, [row(report) for report in reports], right=right)


def dead_letter_table(reports: list[ScenarioReport]) -> str:
    """Dead letters by reason code, one row per scenario and code."""
    rows = [[report.name, code, f"{count:,}"] for report in reports
            for code, count in sorted(report.dead_letters.items(), key=lambda item: -item[1])]
    return format_table(("scenario", "dead-letter code", "records"), rows)


def details(report: ScenarioReport) -> list[str]:
    """The lines under the table that say what a row's numbers are made of."""
    lines = [f"{report.name}: statuses {dict(sorted(report.statuses.items()))}, baseline "
             f"{report.baseline_per_s:.1f} answers/s, {report.duration_s:.0f} s"]
    if report.refused:
        lines.append(f"  refused at the door (not accepted, not owed): {report.refused}")
    if report.malformed_sent:
        lines.append(f"  malformed sent by kind: {dict(Counter(report.malformed_sent).most_common())}")
    if report.http_unexpected:
        lines.append(f"  answers not of the owed class: {report.http_unexpected}")
    for n, died in enumerate(report.worker_exits):
        if n == EXITS_SHOWN:
            lines.append(f"  ... and {len(report.worker_exits) - EXITS_SHOWN} more exits")
            break
        why = "killed by the scenario" if died.planned else "DIED"
        lines.append(f"  {died.worker} exit {died.code} at {died.at_s:.1f}s: {why}")
        if not died.planned and died.log_tail and n < TAILS_SHOWN:
            lines += [f"    | {line}" for line in died.log_tail.splitlines()[-8:]]
    lines += [f"  check: {check}: {'yes' if passed else 'NO'}" for check, passed in report.checks.items()]
    lines += [f"  note: {note}" for note in report.notes]
    return lines


def document(reports: list[ScenarioReport], context: dict[str, Any]) -> dict[str, Any]:
    every = [reason for report in reports for reason in failures(report)]
    return {**context, "passed": not every, "failures": every, "scenarios": [asdict(report) for report in reports]}


def write_json(path: Path, reports: list[ScenarioReport], context: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document(reports, context), indent=2) + "\n")
