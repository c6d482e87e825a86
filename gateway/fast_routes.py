"""The fast path: POST /v1/models/{model}/infer and POST /v1/models/{model}/requests answered
by hand, before FastAPI sees them.

FastAPI's request path (route matching, dependency solving, a Request object, five middlewares
each wrapping `send`, response validation) cost over half of the gateway's CPU on these two
routes, which carry nearly all of its traffic. The gateway's app (`GatewayApp` in gateway/app.py)
hands those two routes to `FastRoutes` before any of FastAPI's layers, and everything else (and
the lifespan) to FastAPI, which still documents the two routes in OpenAPI and serves the rest.

It runs the same checks, on the same state, in the same order as the middlewares of the
FastAPI path (gateway/app.py): authentication (gateway/auth.py), the tenant's quota
(gateway/quotas.py), the in-flight cap and the body limit (gateway/limits.py), then the route
(gateway/model_requests.py); errors become the same answers (gateway/responses.py) and every
answer is counted under the same route and code. Nothing it does can end in a 500: an exception
no check expects is the logged 503 with an error id, as on the FastAPI path.
"""

from starlette.types import Receive, Scope, Send

from gateway.answers import Headers, Refusal, send_body
from gateway.auth import Caller, Gatekeeper
from gateway.limits import InFlight, declared_length, read_body
from gateway.metrics import GatewayMetrics
from gateway.model_requests import INFER_ROUTE, SUBMIT_ROUTE, ModelRequests
from gateway.quotas import QuotaBook
from gateway.responses import UNMATCHED, InternalErrors, error_answer, safe_json

MODELS_PREFIX = "/v1/models/"
ROUTES = {"infer": INFER_ROUTE, "requests": SUBMIT_ROUTE}


def fast_route(scope: Scope) -> tuple[str, str] | None:
    """(model, action) when the request is one the fast path answers, else None.

    Matches what FastAPI's routes match: `{model}` is one non-empty path segment."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    path: str = scope["path"]
    if not path.startswith(MODELS_PREFIX):
        return None
    model, slash, action = path[len(MODELS_PREFIX):].partition("/")
    if not slash or not model or action not in ROUTES:
        return None
    return model, action


class _Outcome:
    """What the request got, for the requests counter: its route once matched, its status once sent."""

    __slots__ = ("route", "status")

    def __init__(self) -> None:
        self.route = UNMATCHED
        self.status = 0


class FastRoutes:
    def __init__(self, *, gatekeeper: Gatekeeper, quotas: QuotaBook, in_flight: InFlight, max_body_bytes: int,
                 requests: ModelRequests, metrics: GatewayMetrics, internal_errors: InternalErrors,
                 retry_after_s: int) -> None:
        self._gatekeeper = gatekeeper
        self._quotas = quotas
        self._in_flight = in_flight
        self._max_body_bytes = max_body_bytes
        self._requests = requests
        self._metrics = metrics
        self._internal_errors = internal_errors
        self._retry_after_s = retry_after_s

    async def answer(self, scope: Scope, receive: Receive, send: Send, model: str, action: str) -> None:
        """Answer a request `fast_route` matched, from its first check to its response."""
        outcome = _Outcome()
        try:
            await self._admit(scope, receive, send, outcome, model, action)
        except Exception:
            await self._internal_errors.answer(scope, send, started=outcome.status != 0)
            outcome.status = outcome.status or 503
        self._metrics.requests_of(outcome.route, str(outcome.status)).inc()

    async def _admit(self, scope: Scope, receive: Receive, send: Send, outcome: _Outcome, model: str,
                     action: str) -> None:
        """Authentication, then the tenant's quota, then the in-flight cap: each refusal is sent as is."""
        caller = await self._gatekeeper.check(scope["path"], scope["headers"])
        if isinstance(caller, Refusal):
            await self._refuse(send, outcome, caller)
            return
        tenant = caller.tenant
        if tenant is not None and (refusal := self._quotas.enter(tenant)) is not None:
            await self._refuse(send, outcome, refusal)
            return
        try:
            if (refusal := self._in_flight.enter()) is not None:
                await self._refuse(send, outcome, refusal)
                return
            try:
                await self._serve(scope, receive, send, outcome, model, action, caller)
            finally:
                self._in_flight.leave()
        finally:
            if tenant is not None:
                self._quotas.leave(tenant)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, outcome: _Outcome, model: str, action: str,
                     caller: Caller) -> None:
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        raw = await read_body(receive, declared_length(headers), self._max_body_bytes)
        if raw is None:
            return  # the client went away before sending its body
        if isinstance(raw, Refusal):
            await self._refuse(send, outcome, raw)
            return
        outcome.route = ROUTES[action]
        requests = self._requests
        try:
            body = requests.body(model, raw, _content_type(headers), caller)
            reply = await (requests.infer(model, body) if action == "infer" else requests.submit(model, body))
        except Exception as exc:
            if (error := error_answer(exc, self._metrics.unavailable_of, self._retry_after_s)) is None:
                raise
            extra = tuple((name.lower().encode(), value.encode()) for name, value in (error.headers or {}).items())
            await self._send(send, outcome, error.status, safe_json(error.content), extra)
            return
        await self._send(send, outcome, reply.status, reply.body)

    @staticmethod
    async def _refuse(send: Send, outcome: _Outcome, refusal: Refusal) -> None:
        outcome.status = refusal.status
        await refusal.send(send)

    @staticmethod
    async def _send(send: Send, outcome: _Outcome, status: int, body: bytes, headers: Headers = ()) -> None:
        outcome.status = status
        await send_body(send, status, body, headers)


def _content_type(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The first Content-Type header, as Starlette's `request.headers.get` reads it."""
    for name, value in headers:
        if name == b"content-type":
            return value.decode("latin-1")
    return None
