"""The console's changes (POST, admin role, CSRF token): each calls the audited function the
matching `fleet` command calls, and goes back to its page saying what happened."""

from __future__ import annotations

import logging
import time

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from common.auth_keys import create_key, revoke_key, valid_tenant
from fleet.commands.debug import switch_off, switch_on
from fleet.commands.dlq_store import parse_ends, purge, replay, select_letters
from fleet.commands.rollout import OPERATOR_ACTIONS, operator_action, start_rollout
from fleet.commands.workers import drain_worker, undrain_worker
from fleet.console.batches import batch_jobs
from gateway import BatchError
from fleet.console.web import admin_change, back, console_of, render
from models import ModelRegistry
from schemas.wire import now_ms
from versions import VersionPointers

router = APIRouter()
log = logging.getLogger(__name__)
MAX_REPLAY = 1000
MAX_DEBUG_MINUTES = 60.0


def _reason(form_reason: str, what: str) -> str:
    return form_reason[:500] or f"{what} from the console"


@router.post("/versions/{model}/action")
async def version_action(request: Request, model: str) -> Response:
    operator, form = await admin_change(request)
    console = console_of(request)
    registry = ModelRegistry(console.settings.registry_dir)
    action = form.one("action")
    reason = _reason(form.one("reason"), action)
    if action == "start":
        state = await start_rollout(console.redis, registry, model, form.one("version"), operator.actor, reason)
    elif action == "set-stable":
        state = await VersionPointers(console.redis, model, registry).set_stable(form.one("version"), operator.actor,
                                                                                 reason)
    elif action in OPERATOR_ACTIONS:
        state = await operator_action(console.redis, registry, model, action, operator.actor, reason)
    else:
        return back("/versions", f"unknown action {action[:40]!r}")
    return back("/versions", f"{model}: {action} done; state {state.state}, stable {state.stable}, "
                             f"candidate {state.candidate or '-'} at {state.percent:g}%")


@router.post("/workers/{worker}/{switch}")
async def worker_switch(request: Request, worker: str, switch: str) -> Response:
    await admin_change(request)
    redis = console_of(request).redis
    if switch == "drain":
        said = await drain_worker(redis, worker)
    elif switch == "undrain":
        said = await undrain_worker(redis, worker)
    else:
        return back("/workers", f"unknown switch {switch[:40]!r}")
    return back("/workers", f"{worker} {said}")


@router.post("/batches/{tenant}/{job}/cancel")
async def batch_cancel(request: Request, tenant: str, job: str) -> Response:
    operator, form = await admin_change(request)
    try:
        status = await batch_jobs(console_of(request)).cancel(job, tenant)
    except BatchError as exc:
        return back("/batches", str(exc))
    log.warning("%s cancelled batch job %s of tenant %s: %s", operator.actor, job, tenant,
                _reason(form.one("reason"), "cancelled"))
    return back("/batches", f"batch job {job} of {tenant}: {status.state.value}")


@router.post("/dlq/replay")
async def dlq_replay(request: Request) -> Response:
    operator, form = await admin_change(request)
    console = console_of(request)
    refs, code = form.all("ref"), form.one("code") or None
    if not refs and code is None:
        return back("/dlq", "choose dead letters, or a code, to replay")
    every = await console.letters.entries()
    if refs:
        entries = select_letters(every, refs=refs[:MAX_REPLAY], limit=MAX_REPLAY)
    else:
        entries = select_letters(every, model=form.one("model") or None, code=code, limit=MAX_REPLAY)
    report = await replay(console.settings, console.redis, entries, operator.actor,
                          _reason(form.one("reason"), "replay"), again=form.one("again") == "1")
    report.skipped += [(ref, "not among the newest dead letters") for ref in sorted(set(refs) - {e.ref for e in entries})]
    skipped = "; ".join(f"{ref}: {why}" for ref, why in report.skipped[:5])
    return back("/dlq", report.summary() + (f" ({skipped})" if skipped else ""))


@router.post("/dlq/purge")
async def dlq_purge(request: Request) -> Response:
    operator, form = await admin_change(request)
    console = console_of(request)
    firsts = await purge(console.settings, console.redis, parse_ends(form.one("ends")), operator.actor,
                         _reason(form.one("reason"), "purge"))
    return back("/dlq", "purged; the DLQ now starts at " + (", ".join(f"{p}:{o}" for p, o in sorted(firsts.items()))
                                                            or "-"))


@router.post("/debug/{model}")
async def debug_switch(request: Request, model: str) -> Response:
    _, form = await admin_change(request)
    redis = console_of(request).redis
    if form.one("switch") == "off":
        return back("/debug", f"{model}: " + ("tracing stopped" if await switch_off(redis, model) else "was not on"))
    minutes = min(max(float(form.one("minutes") or "5"), 1.0), MAX_DEBUG_MINUTES)
    await switch_on(redis, model, minutes * 60)
    return back("/debug", f"{model}: every request traced for {minutes:g} min")


@router.post("/tenants/create", response_class=HTMLResponse)
async def key_create(request: Request) -> Response:
    operator, form = await admin_change(request)
    tenant = form.one("tenant")
    if not valid_tenant(tenant):
        return back("/tenants", f"{tenant[:64]!r} is not a tenant name (lower-case letters, digits, . _ -)")
    issued = await create_key(console_of(request).redis, tenant, now_ms=now_ms())
    # The one page that holds a key: shown once, never stored by the console, never cached.
    response = render(request, "key_created.html", operator, tenant=tenant, key_id=issued.record.key_id,
                      key=issued.key)
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/tenants/revoke")
async def key_revoke(request: Request) -> Response:
    _, form = await admin_change(request)
    record = await revoke_key(console_of(request).redis, form.one("key_id"), now_ms=int(time.time() * 1000))
    if record is None:
        return back("/tenants", f"no key with id {form.one('key_id')[:80]!r}")
    return back("/tenants", f"key {record.key_id} of tenant {record.tenant} revoked")
