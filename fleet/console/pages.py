"""The console's pages (GET): each reads what the matching `fleet` command reads."""

from __future__ import annotations

import json
import time

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from common.auth_keys import list_keys
from common.catalog import GatewayBeat, list_gateways, read_entry
from common.heartbeats import list_workers
from common.tenant_usage import ADMITTED, RATE, WAITS, TenantUsage, read_usage
from fleet.commands.dlq_store import (DeadLetterEntry, audit_entries, counts_by_code, format_ends, letter_fields,
                                      replay_marks, select_letters, time_bound)
from fleet.commands.dlq import replayed_cell
from fleet.commands.keys import when
from fleet.console.batches import batch_jobs, job_row, recent_jobs
from fleet.commands.models import (describe_pointers, format_ms, history_rows, list_rows, listing_word,
                                   registered_models)
from fleet.commands.rollout import OPERATOR_ACTIONS
from fleet.console.assignments import partitions_of_worker
from fleet.console.sources import Gathered, Outage, overview, worker_row
from fleet.console.web import console_of, operator_of, render
from models import ModelRegistry
from versions import VersionPointers, read_report
from schemas.wire import now_ms

router = APIRouter()
USAGE_ROWS = 200  # the busiest tenants of the hour
BATCH_ROWS = 100  # the newest jobs of every tenant
BATCH_COLLECTED = 10  # running jobs whose progress is read from their results topics per page


def usage_row(usage: TenantUsage) -> dict[str, object]:
    use = usage.busiest_use
    return {"tenant": usage.tenant, "minute": usage.this_minute[ADMITTED], "hour": usage.last_hour[ADMITTED],
            "rate": usage.last_hour[RATE], "waits": usage.last_hour[WAITS],
            "minute_refused": usage.this_minute[RATE] + usage.this_minute[WAITS],
            "limit": "-" if usage.rps_limit is None else f"{usage.rps_limit:g}/s",
            "use": "-" if use is None else f"{use:.0%}"}


def gateway_row(beat: GatewayBeat) -> dict[str, object]:
    return {"gateway": beat.gateway, "served": ", ".join(beat.served) or "-",
            "following": "FLEET_MODELS" if beat.allow_list is not None else "the catalogue",
            "age": f"{max(now_ms() - beat.written_ms, 0) / 1000:.1f}s ago"}


async def _overview_context(request: Request) -> tuple[Gathered, dict[str, object]]:
    console = console_of(request)
    gathered = Gathered()
    views = await overview(console.redis, console.monitor, console.throughput, gathered)
    gateways = await gathered.read("Redis", "what each gateway serves", list_gateways(console.redis), [])
    charts = {v.name: console.monitor.series(v.name) for v in views}
    serving = {v.name: console.serving.series(v.name) for v in views}
    return gathered, {"views": views, "rows": {v.name: [worker_row(w) for w in v.workers] for v in views},
                      "gateways": [gateway_row(beat) for beat in gateways],
                      "charts": json.dumps(charts).replace("<", "\\u003c"),
                      "serving": json.dumps(serving).replace("<", "\\u003c"), "sampled_at": format_ms(int(console.monitor.sampled_at * 1000))}


@router.get("/", response_class=HTMLResponse)
async def overview_page(request: Request) -> HTMLResponse:
    operator = operator_of(request)
    gathered, context = await _overview_context(request)
    return render(request, "overview.html", operator, outages=gathered.outages, **context)


@router.get("/live/overview", response_class=HTMLResponse)
async def overview_live(request: Request) -> HTMLResponse:
    operator = operator_of(request)
    gathered, context = await _overview_context(request)
    return render(request, "overview_live.html", operator, outages=gathered.outages, **context)


@router.get("/versions", response_class=HTMLResponse)
async def versions_page(request: Request) -> HTMLResponse:
    operator = operator_of(request)
    console = console_of(request)
    registry = ModelRegistry(console.settings.registry_dir)
    gathered = Gathered()
    models = []
    for name in registered_models(registry):
        pointers = VersionPointers(console.redis, name)
        state = await gathered.read("Redis", "pointers, rollout gates and history", pointers.get(), None)
        report = await gathered.read("Redis", "pointers, rollout gates and history", read_report(console.redis, name), None)
        history = await gathered.read("Redis", "pointers, rollout gates and history", pointers.history(10), [])
        entry = await gathered.read("Redis", "pointers, rollout gates and history", read_entry(console.redis, name),
                                    None)
        models.append({"name": name, "versions": list_rows(registry.versions(name), state, entry), "state": state,
                       "listing": listing_word(entry),
                       "ids": [m.id for m in registry.versions(name)],
                       "pointers": describe_pointers(state) if state is not None else [],
                       "report": report, "history": history_rows(history)})
    return render(request, "versions.html", operator, outages=gathered.outages, models=models,
                  actions=OPERATOR_ACTIONS)


@router.get("/workers", response_class=HTMLResponse)
async def workers_page(request: Request) -> HTMLResponse:
    operator = operator_of(request)
    gathered = Gathered()
    console = console_of(request)
    workers = await gathered.read("Redis", "workers", list_workers(console.redis), [])
    if console.monitor.problem is not None:
        gathered.outages.append(Outage("Kafka", "the partitions each worker holds", console.monitor.problem))
    held = console.monitor.assignments
    return render(request, "workers.html", operator, outages=gathered.outages, workers=[worker_row(w) | {
        "model": w.model, "partitions": partitions_of_worker(held, w.model, w.worker)} for w in workers],
        sampled_at=format_ms(int(console.monitor.sampled_at * 1000)))


@router.get("/tenants", response_class=HTMLResponse)
async def tenants_page(request: Request) -> HTMLResponse:
    operator = operator_of(request)
    gathered = Gathered()
    records = await gathered.read("Redis", "keys", list_keys(console_of(request).redis), [])
    usage = await gathered.read("Redis", "quota use and refusals", read_usage(console_of(request).redis, time.time()), {})
    keys = [{"key_id": r.key_id, "tenant": r.tenant, "created": when(r.created_ms), "active": r.active,
             "state": "active" if r.active else f"revoked {when(r.revoked_ms)}"} for r in records]
    return render(request, "tenants.html", operator, outages=gathered.outages, keys=keys,
                  operators=console_of(request).settings.tenant_roles(), usage=[usage_row(u) for u in sorted(
                      usage.values(), key=lambda u: (-sum(u.last_hour.values()), u.tenant))][:USAGE_ROWS])


@router.get("/batches", response_class=HTMLResponse)
async def batches_page(request: Request) -> HTMLResponse:
    operator = operator_of(request)
    console = console_of(request)
    gathered = Gathered()
    jobs = batch_jobs(console)
    listed = await gathered.read("Redis", "batch jobs", recent_jobs(jobs, BATCH_ROWS), [])
    running = [status for status in listed if status.state.value == "running"][:BATCH_COLLECTED]
    for status in running:  # their progress, as `fleet batch status` reads it
        fresh = await gathered.read("Kafka", "batch progress", jobs.status(status.id, status.tenant), status)
        listed[listed.index(status)] = fresh
    return render(request, "batches.html", operator, outages=gathered.outages, limit=BATCH_ROWS,
                  jobs=[job_row(status) for status in listed])


def _letter_row(entry: DeadLetterEntry, replayed: str) -> dict[str, object]:
    return {"ref": entry.ref, "time": format_ms(entry.letter.time_ms), "model": entry.model,
            "code": entry.letter.code, "reason": entry.letter.reason[:120], "replayed": replayed,
            "replayable": entry.replayable is None}


@router.get("/dlq", response_class=HTMLResponse)
async def dlq_page(request: Request) -> HTMLResponse:
    operator = operator_of(request)
    console = console_of(request)
    model = request.query_params.get("model") or None
    code = request.query_params.get("code") or None
    since, until = (request.query_params.get(name, "")[:64] for name in ("since", "until"))
    try:
        bounds, filter_problem = (time_bound(since, now_ms()), time_bound(until, now_ms())), ""
    except ValueError as exc:  # said on the page, next to the filter; the letters show unfiltered by time
        bounds, filter_problem = (None, None), str(exc)
    gathered = Gathered()
    every = await gathered.read("Kafka", "dead letters", console.letters.entries(), [])
    chosen = select_letters(every, model=model, code=code, limit=200, since_ms=bounds[0], until_ms=bounds[1])
    marks = await gathered.read("Redis", "replay marks and the audit log",
                                replay_marks(console.redis, [e.ref for e in chosen]), {})
    audit = await gathered.read("Redis", "replay marks and the audit log", audit_entries(console.redis), [])
    ends = console.letters.ends
    return render(request, "dlq.html", operator, outages=gathered.outages, model=model or "", code=code or "",
                  since=since, until=until, filter_problem=filter_problem,
                  counts=counts_by_code(every), letters=[_letter_row(e, replayed_cell(marks.get(e.ref))) for e in chosen],
                  audit=[a | {"time": format_ms(int(a.get("time_ms", "0")))} for a in audit], ends=format_ends(ends))


@router.get("/dlq/letter/{ref}", response_class=HTMLResponse)
async def letter_page(request: Request, ref: str) -> HTMLResponse:
    operator = operator_of(request)
    console = console_of(request)
    gathered = Gathered()
    every = await gathered.read("Kafka", "the dead letter", console.letters.entries(), [])
    found = select_letters(every, refs=[ref], limit=1)
    marks = await gathered.read("Redis", "its replay mark", replay_marks(console.redis, [ref]), {})
    entry = found[0] if found else None
    fields = [*letter_fields(entry, masked=False), ("replayed", replayed_cell(marks.get(ref)))] if entry else []
    masked = json.dumps(entry.masked, indent=2, ensure_ascii=False, default=str) if entry is not None else ""
    return render(request, "letter.html", operator, status_code=200 if entry or gathered.outages else 404,
                  outages=gathered.outages, ref=ref, entry=entry, fields=fields, masked=masked)
