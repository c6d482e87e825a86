"""The protocol's REST routes, answered before FastAPI like the /v1 fast path (gateway/fast_routes.py):

  GET  /v2                      server metadata (open)
  GET  /v2/health/live|ready    {"live": true} / {"ready": true} (open: probes)
  GET  /v2/models/{m}[/versions/{v}]         model metadata
  GET  /v2/models/{m}[/versions/{v}]/ready   {"name": m, "ready": true}

Ready means what the protocol's clients expect (they read the status alone): a live worker serves
the model's stable version (or the pinned one); the server is ready when every model it serves is.
Not ready is a 503 with {"ready": false, "reason": ...}. `?readiness=queued` asks the other
question: are calls accepted now (they queue in Kafka until a worker takes them).
  POST /v2/models/{m}[/versions/{v}]/infer   JSON, binary tensor extension or raw binary

The model routes meet the one admission (gateway/admission.py) at /v2's door, which gRPC shares:
key, tenant, quota, in-flight, body, in that order, on the same state as /v1; then, once an infer's
body is parsed, its rows (each row one of the tenant's requests). A refusal is its status, the
`fleet-refusal` header and {"error": "...", "refusal": kind}; the route's own errors are
{"error": "..."} with the status of gateway/oip/errors.py. Nothing ends in a 500.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import parse_qsl

import orjson
from starlette.types import Receive, Scope, Send

from gateway.admission import Admission, Door, Pass
from gateway.metrics import GatewayMetrics
from gateway.oip.codec import answer_body, decoded_body, read_call
from gateway.oip.errors import Failure, OipError
from gateway.oip.service import OipService, Readiness, server_metadata
from gateway.readiness import Served
from gateway.refusals import Refusal, Refused
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
    def __init__(self, *, service: OipService, admission: Admission, door: Door, metrics: GatewayMetrics,
                 internal_errors: InternalErrors) -> None:
        self._service = service
        self._admission = admission
        self._door = door
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
        except Refused as exc:
            await sending(exc.refusal.status, *refusal_body(exc.refusal))
        except Exception:
            await self._internal_errors.answer(scope, send, started=status != 0)
            status = status or 503
        self._metrics.requests_of(label, str(status)).inc()

    async def _answer(self, route: Route, scope: Scope, receive: Receive, send: Sender) -> None:
        service = self._service
        if (scope["method"], scope["path"]) in OPEN:
            if route.action == "ready":
                served = await service.server_ready(readiness_of(scope))
                await send(*ready_answer({}, served))
                return
            body = server_metadata() if route.action == "server" else {"live": True}
            await send(200, orjson.dumps(body), [(b"content-type", JSON)])
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        admitted = await self._admission.admit(self._door, headers)
        if isinstance(admitted, Refusal):
            raise Refused(admitted)
        try:
            raw = await admitted.body(receive, headers)
            if raw is None:
                return  # the client went away before sending its body
            if isinstance(raw, Refusal):
                raise Refused(raw)
            if route.action == "infer":
                await self._infer(route, headers, raw, admitted, send)
            elif route.action == "model_ready":
                served = await service.model_ready(route.model, route.version, readiness_of(scope))
                await send(*ready_answer({"name": route.model}, served))
            else:
                document = await service.model_metadata(route.model, route.version)
                await send(200, orjson.dumps(document), [(b"content-type", JSON)])
        finally:
            admitted.release()

    async def _infer(self, route: Route, headers: list[tuple[bytes, bytes]], raw: bytes, admitted: Pass,
                     send: Sender) -> None:
        service = self._service
        task = await service.task(route.model, route.version)
        call = read_call(decoded_body(raw, headers, self._door.max_body_bytes), headers, task, service.limits)
        texts = service.rows_of(task, call, service.max_text_chars)
        if (refusal := admitted.rows(len(texts))) is not None:
            raise Refused(refusal)
        answer = await service.infer(route.model, route.version, task, call, texts, admitted.caller)
        content, header_length = answer_body(answer)
        if header_length is None:
            await send(200, content, [(b"content-type", JSON)])
        else:
            await send(200, content, [(b"content-type", b"application/octet-stream"),
                                      (b"inference-header-content-length", str(header_length).encode())])


def readiness_of(scope: Scope) -> Readiness:
    """`?readiness=serving` (the default) or `?readiness=queued`; anything else is a 400."""
    for name, value in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True):
        if name == "readiness":
            try:
                return Readiness(value)
            except ValueError:
                raise OipError(Failure.bad_input, f"readiness={value[:40]!r}: use serving (a live worker serves "
                                                  "the model; the default) or queued (calls are accepted)") from None
    return Readiness.serving


def ready_answer(document: dict[str, object], served: Served) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """200 when ready, else 503 with the reason: the protocol's clients read the status alone."""
    body = {**document, "ready": served.ready} | ({} if served.ready else {"reason": served.reason})
    return (200 if served.ready else 503), orjson.dumps(body), [(b"content-type", JSON)]


def refusal_body(refusal: Refusal) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The protocol's form of an admission refusal: {"error": ..., "refusal": kind}, with its headers."""
    return orjson.dumps(refusal.content("error")), [(b"content-type", JSON), *refusal.http_headers()]


def error_body(exc: OipError) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    content: dict[str, object] = {"error": exc.message}
    if exc.ids:
        content["ids"] = list(exc.ids)
    headers = [(b"content-type", JSON)]
    if exc.retry_after_s is not None:
        headers.append((b"retry-after", str(exc.retry_after_s).encode()))
    return orjson.dumps(content), headers


def is_oip(scope: Scope) -> bool:
    """Whether the request is one of the protocol's: every path under /v2."""
    if scope["type"] != "http":
        return False
    path: str = scope["path"]
    return path == PREFIX or path.startswith("/v2/")
