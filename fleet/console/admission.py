"""The console's entry point into the one admission (gateway/admission.py): one ASGI middleware
in front of every route, which reads the session cookie, asks admission, and translates a
refusal into what a browser can use (gateway/refusals.py has the kinds):

  unauthenticated  back to the sign-in page, saying why (a GET is redirected there, htmx is told
                   to go there, a POST is answered with the page itself, 401)
  other kinds      the refusal page with the kind's status (403, 413, 429 or 503) and Retry-After

The sign-in page and the static files meet no admission, nor does signing out (a session that has
ended can still be signed out of); their bodies are bounded by the same limit. An admitted request
carries its `Operator` in scope state "operator" (read by fleet/console/web.py `operator_of`) and
holds its in-flight place until it is answered.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from fleet.console.access import COOKIE, ConsoleAccess
from fleet.console.web import console_of, render
from gateway import Kind, Refusal, declared_length, read_body, replayed

OPEN_PATHS = frozenset({"/login", "/logout"})
STATIC_PREFIX = "/static/"
LIVE_PREFIX = "/live/"  # the pages' own refreshes: not an operator's activity


class AdmitConsole:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(STATIC_PREFIX):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        access = console_of(request).access
        if scope["path"] in OPEN_PATHS:
            await self._bounded(scope, receive, send, access)
            return
        admitted = await access.admit(request.cookies.get(COOKIE),
                                      activity=not scope["path"].startswith(LIVE_PREFIX))
        if isinstance(admitted, Refusal):
            await refusal_page(request, admitted)(scope, receive, send)
            return
        try:
            scope.setdefault("state", {})["operator"] = access.operator(admitted)
            body = await admitted.body(receive, scope["headers"])
            if body is None:
                return  # the client went away before sending its body
            if isinstance(body, Refusal):
                await refusal_page(request, body)(scope, receive, send)
                return
            await self.app(scope, replayed(body, receive), send)
        finally:
            admitted.release()

    async def _bounded(self, scope: Scope, receive: Receive, send: Send, access: ConsoleAccess) -> None:
        """An open path's body, within the console's limit (the sign-in form brings its key in it)."""
        body = await read_body(receive, declared_length(scope["headers"]), access.door.max_body_bytes)
        if body is None:
            return
        if isinstance(body, Refusal):
            await refusal_page(Request(scope, receive), body)(scope, receive, send)
            return
        await self.app(scope, replayed(body, receive), send)


def refusal_page(request: Request, refusal: Refusal) -> Response:
    """A refusal in the browser's terms: a caller not signed in is sent to sign in, the sign-in form
    is shown again with why it failed, anything else is the refusal page; each with its status."""
    if refusal.kind is Kind.unauthenticated and (request.method == "GET" or request.headers.get("hx-request")):
        return not_signed_in(request, refusal.detail)
    at_sign_in = refusal.kind is Kind.unauthenticated or request.url.path == "/login"
    page = render(request, "login.html" if at_sign_in else "refused.html", None, status_code=refusal.status,
                  why=words(refusal))
    page.headers.update({name.decode(): value.decode() for name, value in refusal.http_headers()})
    return page


def words(refusal: Refusal) -> str:
    """The refusal said for an operator; an outage says which server is away."""
    if refusal.kind is Kind.unavailable:
        return f"Redis does not answer ({refusal.detail}); try again when it is back"
    return refusal.detail


def not_signed_in(request: Request, why: str) -> Response:
    if request.headers.get("hx-request"):
        return Response(status_code=401, headers={"HX-Redirect": "/login"})
    if request.method != "GET":
        return login_page(request, why, 401)
    return RedirectResponse(f"/login?why={quote(why[:200])}", status_code=303)


def login_page(request: Request, why: str, status_code: int = 200) -> HTMLResponse:
    return render(request, "login.html", None, status_code=status_code, why=why)

