"""Admission (gateway/admission.py) for the routes FastAPI serves: GET /v1/results/{id}, GET
/metrics, and the two /v1 model routes when the fast path is off. One ASGI middleware in front of
FastAPI's routes picks the door by path, writes a refusal as /v1 writes it
(gateway/answers.py `send_refusal`), reads the body under the door's limit and hands it on.

The probes (/healthz, /readyz) and the API's documentation (/docs, /openapi.json) are open to all
and meet no admission; /metrics is the metrics tenants' door (not metered: a scrape under load is
never refused for the tenants' quotas or the in-flight bound); /v1/batches is the batch door (its
upload is streamed to the route, up to the batch file limit); every other path is /v1's door.
"""

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.admission import Admission, Door
from gateway.answers import send_refusal
from gateway.docs_page import is_docs_path
from gateway.limits import replayed
from gateway.refusals import Refusal

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
METRICS_PATH = "/metrics"
BATCHES_PATH = "/v1/batches"  # its door streams the body: a batch file is far larger than a call


class AdmitHttp:
    """ASGI middleware: admits a request (the caller goes in scope state "caller", read by
    `gateway.auth.caller_of`) or sends its refusal; releases what it held once answered."""

    def __init__(self, app: ASGIApp, admission: Admission, v1: Door, metrics: Door, batches: Door) -> None:
        self.app = app
        self.admission = admission
        self.v1 = v1
        self.metrics = metrics
        self.batches = batches

    def door_of(self, path: str) -> Door:
        if path == METRICS_PATH:
            return self.metrics
        return self.batches if path == BATCHES_PATH or path.startswith(BATCHES_PATH + "/") else self.v1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or is_docs_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        door = self.door_of(scope["path"])
        admitted = await self.admission.admit(door, scope["headers"])
        if isinstance(admitted, Refusal):
            await send_refusal(send, admitted)
            return
        try:
            body = await admitted.body(receive, scope["headers"])
            if body is None:
                return  # the client went away before sending its body
            if isinstance(body, Refusal):
                await send_refusal(send, body)
                return
            scope.setdefault("state", {})["caller"] = admitted.caller
            await self.app(scope, receive if door.streams_body else replayed(body, receive), send)
        finally:
            admitted.release()

