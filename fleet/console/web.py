"""What every console route shares: the app's state, the signed-in operator, forms, rendering."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from fastapi import Request
from starlette.exceptions import HTTPException
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from common.redis_cluster import AnyRedis
from fleet.commands.lag import format_duration
from fleet.console.access import COOKIE, Gate, Operator, Refused
from fleet.console.dead_letters import DeadLetterShelf
from fleet.console.lag_monitor import LagMonitor
from fleet.console.serving_history import ServingHistory
from fleet.console.settings import ConsoleSettings
from fleet.console.sources import Outage
from fleet.console.throughput import ThroughputMemory

HERE = Path(__file__).resolve().parent
TEMPLATES = Jinja2Templates(directory=HERE / "templates")
TEMPLATES.env.globals["fmt_duration"] = format_duration
MAX_FORM_BYTES = 64 * 1024
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


@dataclass
class Console:
    settings: ConsoleSettings
    redis: AnyRedis
    gate: Gate
    monitor: LagMonitor
    letters: DeadLetterShelf
    serving: ServingHistory
    throughput: ThroughputMemory = field(default_factory=ThroughputMemory)


class NotSignedIn(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class Forbidden(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


async def operator_of(request: Request) -> Operator:
    console = console_of(request)
    try:
        return await console.gate.admit(console.redis, request.cookies.get(COOKIE))
    except Refused as exc:
        raise NotSignedIn(str(exc)) from exc


class Form:
    """An urlencoded form body, bounded; repeated fields keep every value."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self.fields = fields

    def one(self, name: str, default: str = "") -> str:
        values = self.fields.get(name)
        return values[0].strip() if values else default

    def all(self, name: str) -> list[str]:
        return [v.strip() for v in self.fields.get(name, []) if v.strip()]


async def read_form(request: Request) -> Form:
    """The form, read no further than MAX_FORM_BYTES (413 beyond)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(413, f"a form is at most {MAX_FORM_BYTES // 1024} KiB")
    return Form(parse_qs(body.decode("utf-8", "replace"), max_num_fields=2000))


def same_origin(request: Request) -> None:
    """Forbidden when the browser says the POST comes from another site's page (Origin header)."""
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        raise Forbidden("this form was sent from another site's page")


async def admin_change(request: Request) -> tuple[Operator, Form]:
    """The operator and form of a changing POST: an admin, with the CSRF token, or Forbidden."""
    same_origin(request)
    operator = await operator_of(request)
    form = await read_form(request)
    token = form.one(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
    if not console_of(request).gate.csrf_ok(operator, token):
        raise Forbidden("this change carries no valid CSRF token; reload the page and try again")
    if not operator.admin:
        raise Forbidden(f"tenant {operator.tenant} has the read role: it sees every page and changes nothing")
    return operator, form


def render(request: Request, template: str, operator: Operator | None, status_code: int = 200,
           outages: list[Outage] | None = None, **context: Any) -> HTMLResponse:
    console = console_of(request)
    csrf = console.gate.csrf_token(operator) if operator is not None else ""
    every = list(outages or [])
    if operator is not None and operator.redis_down and not any(o.server == "Redis" for o in every):
        every.append(Outage("Redis", "workers, pointers, keys and replay marks", "signed in on an earlier check"))
    page = {"operator": operator, "csrf": csrf, "outages": every, "note": request.query_params.get("note", "")[:500],
            "path": request.url.path, **context}
    return TEMPLATES.TemplateResponse(request, template, page, status_code=status_code)


def back(path: str, note: str) -> Response:
    """After a change: back to the page (303, so a reload does not post again), saying what happened."""
    return RedirectResponse(f"{path}?note={quote(note[:400])}", status_code=303)
