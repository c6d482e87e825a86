"""Shadow comparisons and debug traces (GET): `fleet shadow report` and `fleet debug status|tail`
as pages. Inputs are shown redacted: trace inputs are redacted by the workers, and shadow input
excerpts here, with the same redaction."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from common.topics import newest_records
from fleet.commands.debug import remaining_s
from fleet.commands.debug import render as render_trace
from fleet.commands.models import registered_models
from fleet.commands.shadow import build_report
from fleet.console.shadow_series import shadow_series, worst_rows
from fleet.console.sources import Gathered
from fleet.console.web import console_of, operator_of, render
from models import ModelRegistry
from schemas.names import TRACE_TOPIC
from schemas.shadow import Comparison
from schemas.wire import TraceRecord, WireError
from workers import Redactor

router = APIRouter()
RECENT_COMPARISONS = 200  # per partition, as `fleet shadow report --last`
RECENT_TRACES = 50  # per partition of fleet.trace


@router.get("/shadow", response_class=HTMLResponse)
async def shadow_page(request: Request) -> HTMLResponse:
    """The page at once; each model's report fills in after (it reads the comparisons topic)."""
    operator = operator_of(request)
    models = registered_models(ModelRegistry(console_of(request).settings.registry_dir))
    return render(request, "shadow.html", operator, models=models)


@router.get("/live/shadow/{model}", response_class=HTMLResponse)
async def shadow_report(request: Request, model: str) -> HTMLResponse:
    operator = operator_of(request)
    gathered = Gathered()
    mine: list[Comparison] = []
    built = await gathered.read("Kafka or Redis", "shadow comparisons",
                                build_report(console_of(request).settings, model, None, RECENT_COMPARISONS,
                                             mask=Redactor.with_defaults(), collect=mine), None)
    series = shadow_series(mine).as_json()
    return render(request, "shadow_report.html", operator, outages=gathered.outages, text=built[0] if built else None,
                  model=model, worst=worst_rows(mine),
                  series=json.dumps(series).replace("<", "\\u003c") if series else None)


async def _traces(request: Request) -> tuple[Gathered, list[str]]:
    gathered = Gathered()
    records = await gathered.read("Kafka", "debug traces", newest_records(console_of(request).settings, TRACE_TOPIC,
                                                                             RECENT_TRACES), [])
    lines = []
    for record in sorted(records, key=lambda r: r.timestamp, reverse=True):
        try:
            lines.append(render_trace(TraceRecord.decode(record.value or b"")))
        except WireError:
            lines.append(f"(offset {record.offset}: not a trace record)")
    return gathered, lines


@router.get("/debug", response_class=HTMLResponse)
async def debug_page(request: Request) -> HTMLResponse:
    """The switches at once; the traces fill in after, and refresh every 3 s (they read fleet.trace)."""
    operator = operator_of(request)
    console = console_of(request)
    gathered = Gathered()
    switches = []
    for model in registered_models(ModelRegistry(console.settings.registry_dir)):
        left = await gathered.read("Redis", "debug switches", remaining_s(console.redis, model), None)
        switches.append({"model": model, "left": None if left is None else f"on, {left:.0f} s left"})
    return render(request, "debug.html", operator, outages=gathered.outages, switches=switches)


@router.get("/live/debug", response_class=HTMLResponse)
async def debug_live(request: Request) -> HTMLResponse:
    operator = operator_of(request)
    gathered, lines = await _traces(request)
    return render(request, "debug_traces.html", operator, outages=gathered.outages, traces=lines)
