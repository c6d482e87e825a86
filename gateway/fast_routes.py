"""The fast path: POST /v1/models/{model}/infer and POST /v1/models/{model}/requests answered
by hand, before FastAPI sees them.

FastAPI's request path (route matching, dependency solving, a Request object, middlewares each
wrapping `send`, response validation) cost over half of the gateway's CPU on these two routes,
which carry nearly all of its traffic. The gateway's app (`GatewayApp` in gateway/app.py) hands
those two routes to `FastRoutes` before any of FastAPI's layers, and everything else (and the
lifespan) to FastAPI, which still documents the two routes in OpenAPI and serves the rest.

A request meets the one admission (gateway/admission.py: key, tenant, quota, in-flight, body,
in that order) at /v1's door, as on the FastAPI path (gateway/http_admission.py), and a refusal is
written the same way (gateway/answers.py `send_refusal`); then the route (gateway/model_requests.py),
whose errors become the same answers as FastAPI's (gateway/responses.py). Every answer is counted
under the same route and code. Nothing it does can end in a 500: an exception no check expects is
the logged 503 with an error id, as on the FastAPI path.
"""

from starlette.types import Receive, Scope, Send

from gateway.admission import Admission, Door, Pass
from gateway.answers import Headers, send_body, send_refusal
from gateway.metrics import GatewayMetrics
from gateway.model_requests import INFER_ROUTE, SUBMIT_ROUTE, ModelRequests
from gateway.refusals import Refusal
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
    def __init__(self, *, admission: Admission, door: Door, requests: ModelRequests, metrics: GatewayMetrics,
                 internal_errors: InternalErrors, retry_after_s: int) -> None:
        self._admission = admission
        self._door = door
        self._requests = requests
        self._metrics = metrics
        self._internal_errors = internal_errors
        self._retry_after_s = retry_after_s

    async def answer(self, scope: Scope, receive: Receive, send: Send, model: str, action: str) -> None:
        """Answer a request `fast_route` matched, from its admission to its response."""
        outcome = _Outcome()
        try:
            await self._admit(scope, receive, send, outcome, model, action)
        except Exception:
            await self._internal_errors.answer(scope, send, started=outcome.status != 0)
            outcome.status = outcome.status or 503
        self._metrics.requests_of(outcome.route, str(outcome.status)).inc()

    async def _admit(self, scope: Scope, receive: Receive, send: Send, outcome: _Outcome, model: str,
                     action: str) -> None:
        """Admission, the body under /v1's limit, then the route; a refusal is sent as is."""
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        admitted = await self._admission.admit(self._door, headers)
        if isinstance(admitted, Refusal):
            await self._refuse(send, outcome, admitted)
            return
        try:
            raw = await admitted.body(receive, headers)
            if raw is None:
                return  # the client went away before sending its body
            if isinstance(raw, Refusal):
                await self._refuse(send, outcome, raw)
                return
            await self._serve(send, outcome, model, action, raw, _content_type(headers), admitted)
        finally:
            admitted.release()

    async def _serve(self, send: Send, outcome: _Outcome, model: str, action: str, raw: bytes,
                     content_type: str | None, admitted: Pass) -> None:
        outcome.route = ROUTES[action]
        requests = self._requests
        try:
            body = await requests.body(model, raw, content_type, admitted.caller)
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
        await send_refusal(send, refusal)

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
