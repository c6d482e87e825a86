"""The protocol's REST routes, answered before FastAPI like the /v1 fast path (gateway/fast_routes.py):

  GET  /v2                      server metadata (open)
  GET  /v2/health/live|ready    {"live": true} / {"ready": true} (open: probes)
  GET  /v2/models/{m}[/versions/{v}]         model metadata
  GET  /v2/models/{m}[/versions/{v}]/ready   {"name": m, "ready": bool}
  POST /v2/models/{m}[/versions/{v}]/infer   JSON, binary tensor extension or raw binary

The model routes run the /v1 routes' checks on the same state: the API key (gateway/auth.py),
the in-flight cap (gateway/limits.py), then, once the body is read and checked, the tenant's
quota, one token per row (gateway/quotas.py). Errors are {"error": "..."}; nothing ends in a 500.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson
from starlette.types import Receive, Scope, Send

from gateway.answers import Refusal
from gateway.auth import Caller, Gatekeeper
from gateway.limits import InFlight, declared_length, read_body
from gateway.metrics import GatewayMetrics
from gateway.oip.codec import answer_body, decoded_body, read_call
from gateway.oip.errors import Failure, OipError, failure_of_status
from gateway.oip.service import OipService, server_metadata
from gateway.quotas import QuotaBook
from gateway.responses import InternalErrors

PREFIX = "/v2"
JSON = b"application/json"
OPEN = {("GET", "/v2"), ("GET", "/v2/health/live"), ("GET", "/v2/health/ready")}
ACTIONS = {"": "GET", "ready": "GET", "infer": "POST"}
# Sends a whole answer: status, body, headers.
Sender = Callable[[int, bytes, list[tuple[bytes, bytes]]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Route:
    action: str  # "server", "live", "ready", "" (model metadata), "model_ready", "infer"
    model: str = ""
    version: str | None = None

    @property
    def label(self) -> str:
        """The route as the requests metric names it."""
        return LABELS[self.action, self.version is not None]


_MODEL, _VERSION = "/v2/models/{model}", "/v2/models/{model}/versions/{version}"
LABELS = {**{(action, pinned): label for pinned in (False, True)
             for action, label in (("server", "/v2"), ("live", "/v2/health/live"), ("ready", "/v2/health/ready"))},
          **{(action, pinned): (_VERSION if pinned else _MODEL) + suffix for pinned in (False, True)
             for action, suffix in (("", ""), ("model_ready", "/ready"), ("infer", "/infer"))}}


def match(method: str, path: str) -> Route:
    """The route of a /v2 request; OipError not_found, or wrong_method."""
    parts = path.split("/")[2:]
    route: Route | None = None
    if not parts or parts == [""]:
        route = Route("server")
    elif parts[0] == "health" and len(parts) == 2 and parts[1] in ("live", "ready"):
        route = Route(parts[1])
    elif parts[0] == "models" and len(parts) >= 2 and parts[1]:
        model, rest = parts[1], parts[2:]
        version = None
        if len(rest) >= 2 and rest[0] == "versions" and rest[1]:
            version, rest = rest[1], rest[2:]
        if len(rest) <= 1 and (action := rest[0] if rest else "") in ACTIONS:
            if method != ACTIONS[action]:
                raise OipError(Failure.wrong_method, f"{method} {path[:200]}: use {ACTIONS[action]}")
            return Route("model_ready" if action == "ready" else action, model, version)
    if route is None:
        raise OipError(Failure.not_found, f"no route {path[:200]!r}")
    if method != "GET":
        raise OipError(Failure.wrong_method, f"{method} {path[:200]}: use GET")
    return route


class OipRoutes:
    def __init__(self, *, service: OipService, gatekeeper: Gatekeeper, quotas: QuotaBook, in_flight: InFlight,
                 max_body_bytes: int, metrics: GatewayMetrics, internal_errors: InternalErrors) -> None:
        self._service = service
        self._gatekeeper = gatekeeper
        self._quotas = quotas
        self._in_flight = in_flight
        self._max_body_bytes = max_body_bytes
        self._metrics = metrics
        self._internal_errors = internal_errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        label, status = "unmatched", 0

        async def sending(code: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
            nonlocal status
            status = code
            await send({"type": "http.response.start", "status": code,
                        "headers": [(b"content-length", str(len(body)).encode()), *headers]})
            await send({"type": "http.response.body", "body": body})

        try:
            route = match(scope["method"], scope["path"])
            label = route.label
            await self._answer(route, scope, receive, sending)
        except OipError as exc:
            await sending(exc.failure.status, *error_body(exc))
        except Exception:
            await self._internal_errors.answer(scope, send, started=status != 0)
            status = status or 503
        self._metrics.requests_of(label, str(status)).inc()

    async def _answer(self, route: Route, scope: Scope, receive: Receive, send: Sender) -> None:
        service = self._service
        if (scope["method"], scope["path"]) in OPEN:
            if route.action == "ready":
                ready = service.server_ready()
                await send(200 if ready else 503, orjson.dumps({"ready": ready}), [(b"content-type", JSON)])
                return
            body = server_metadata() if route.action == "server" else {"live": True}
            await send(200, orjson.dumps(body), [(b"content-type", JSON)])
            return
        caller = await self._gatekeeper.check(scope["path"], scope["headers"])
        if isinstance(caller, Refusal):
            raise refusal_error(caller)
        if route.action == "infer":
            await self._infer(route, scope, receive, send, caller)
            return
        with self._quota(caller, 1):
            if route.action == "model_ready":
                ready = await service.model_ready(route.model, route.version)
                await send(200, orjson.dumps({"name": route.model, "ready": ready}), [(b"content-type", JSON)])
            else:
                document = await service.model_metadata(route.model, route.version)
                await send(200, orjson.dumps(document), [(b"content-type", JSON)])

    async def _infer(self, route: Route, scope: Scope, receive: Receive, send: Sender, caller: Caller) -> None:
        service = self._service
        task = await service.task(route.model, route.version)
        if (refusal := self._in_flight.enter()) is not None:
            raise refusal_error(refusal)
        try:
            headers: list[tuple[bytes, bytes]] = scope["headers"]
            body = await read_body(receive, declared_length(headers), self._max_body_bytes)
            if body is None:
                return  # the client went away before sending its body
            if isinstance(body, Refusal):
                raise refusal_error(body)
            call = read_call(decoded_body(body, headers, self._max_body_bytes), headers, task, service.limits)
            texts = service.rows_of(task, call, service.max_text_chars)
            with self._quota(caller, len(texts)):
                answer = await service.infer(route.model, route.version, task, call, texts, caller)
        finally:
            self._in_flight.leave()
        content, header_length = answer_body(answer)
        if header_length is None:
            await send(200, content, [(b"content-type", JSON)])
        else:
            await send(200, content, [(b"content-type", b"application/octet-stream"),
                                      (b"inference-header-content-length", str(header_length).encode())])

    def _quota(self, caller: Caller, rows: int) -> "TenantRows":
        return TenantRows(self._quotas, caller.tenant, rows)


class TenantRows:
    """A tenant's quota held for `rows` requests while a call is served: 429 when any of them is over it."""

    def __init__(self, quotas: QuotaBook, tenant: str | None, rows: int) -> None:
        self._quotas, self._tenant, self._rows, self._held = quotas, tenant, rows, 0

    def __enter__(self) -> None:
        if self._tenant is None:
            return
        for _ in range(self._rows):
            if (refusal := self._quotas.enter(self._tenant)) is not None:
                self.__exit__()
                raise refusal_error(refusal)
            self._held += 1

    def __exit__(self, *exc_info: object) -> None:
        for _ in range(self._held):
            self._quotas.leave(self._tenant or "")
        self._held = 0


def refusal_error(refusal: Refusal) -> OipError:
    """An admission check's refusal as the protocol's error, with its Retry-After."""
    retry = next((int(value) for name, value in refusal.headers if name == b"retry-after"), None)
    return OipError(failure_of_status(refusal.status), str(refusal.content.get("detail", "refused")),
                    retry_after_s=retry)


def error_body(exc: OipError) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    content: dict[str, object] = {"error": exc.message}
    if exc.ids:
        content["ids"] = list(exc.ids)
    headers = [(b"content-type", JSON)]
    if exc.retry_after_s is not None:
        headers.append((b"retry-after", str(exc.retry_after_s).encode()))
    if exc.failure is Failure.unauthenticated:
        headers.append((b"www-authenticate", b"Bearer"))
    return orjson.dumps(content), headers


def is_oip(scope: Scope) -> bool:
    """Whether the request is one of the protocol's: every path under /v2."""
    if scope["type"] != "http":
        return False
    path: str = scope["path"]
    return path == PREFIX or path.startswith("/v2/")
