"""What every console route shares: the app's state, the signed-in operator, forms, rendering."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from common.redis_cluster import AnyRedis
from fleet.commands.lag import format_duration
from fleet.console.access import ConsoleAccess, Operator
from fleet.console.dead_letters import DeadLetterShelf
from fleet.console.lag_monitor import LagMonitor
from fleet.console.serving_history import ServingHistory
from fleet.console.settings import ConsoleSettings
from fleet.console.sources import Outage
from fleet.console.throughput import ThroughputMemory

HERE = Path(__file__).resolve().parent
TEMPLATES = Jinja2Templates(directory=HERE / "templates")
TEMPLATES.env.globals["fmt_duration"] = format_duration
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


@dataclass
class Console:
    settings: ConsoleSettings
    redis: AnyRedis
    access: ConsoleAccess
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


def operator_of(request: Request) -> Operator:
    """The signed-in operator, as admission found it (fleet/console/admission.py); a route it did not
    run for lets no one in."""
    operator = getattr(request.state, "operator", None)
    if not isinstance(operator, Operator):
        raise NotSignedIn("sign in with the key of an operator tenant")
    return operator


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
    """The form; admission has read its body within the console's limit (413 beyond)."""
    return Form(parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=2000))


def same_origin(request: Request) -> None:
    """Forbidden when the browser says the POST comes from another site's page (Origin header)."""
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        raise Forbidden("this form was sent from another site's page")


async def admin_change(request: Request) -> tuple[Operator, Form]:
    """The operator and form of a changing POST: an admin, with the CSRF token, or Forbidden."""
    same_origin(request)
    operator = operator_of(request)
    form = await read_form(request)
    token = form.one(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
    if not console_of(request).access.csrf_ok(operator, token):
        raise Forbidden("this change carries no valid CSRF token; reload the page and try again")
    if not operator.admin:
        raise Forbidden(f"tenant {operator.tenant} has the read role: it sees every page and changes nothing")
    return operator, form


def render(request: Request, template: str, operator: Operator | None, status_code: int = 200,
           outages: list[Outage] | None = None, **context: Any) -> HTMLResponse:
    console = console_of(request)
    csrf = console.access.csrf_token(operator) if operator is not None else ""
    every = list(outages or [])
    if operator is not None and operator.redis_down and not any(o.server == "Redis" for o in every):
        every.append(Outage("Redis", "workers, pointers, keys and replay marks", "signed in on an earlier check"))
    page = {"operator": operator, "csrf": csrf, "outages": every, "note": request.query_params.get("note", "")[:500],
            "path": request.url.path, **context}
    return TEMPLATES.TemplateResponse(request, template, page, status_code=status_code)


def back(path: str, note: str) -> Response:
    """After a change: back to the page (303, so a reload does not post again), saying what happened."""
    return RedirectResponse(f"{path}?note={quote(note[:400])}", status_code=303)
