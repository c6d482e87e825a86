"""The steady load of a chaos run: a fixed rate of valid requests, in turn over the four ways users
send them, each outcome written into the current scenario's Ledger.

    http-infer   POST /v1/models/<m>/infer, waits for the result (200), or 504 with the id (still owed)
    http-submit  POST /v1/models/<m>/requests with a results topic: 202 + id, result on that topic
    client       FleetClient.infer: produce to Kafka, await the reply through Redis
    pipeline     a plain Kafka producer writes the request map; the result comes on the results topic

Open loop: requests leave on schedule whatever the answers do, so an outage shows as a gap in the
answers, not as a quieter sender.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Callable
from typing import Any

import httpx
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from fleet_dev.chaos.ledger import Ledger
from gateway.client import FleetClient, InferenceTimeout
from schemas.names import requests_topic
from schemas.wire import ReplyTo, Request, new_request_id, now_ms

PATHS = ("http-infer", "http-submit", "client", "pipeline")
INFER_TIMEOUT_MS = 30_000
SUBMIT_TIMEOUT_MS = 60_000
PIPELINE_DEADLINE_MS = 120_000
HTTP_CLIENT_SLACK_S = 10.0


class SteadyLoad:
    def __init__(self, *, model: str, results_topic: str, rate_per_s: float, client: FleetClient,
                 http: httpx.AsyncClient, producer: AIOKafkaProducer, headers: dict[str, str]) -> None:
        self.model, self.results_topic, self.rate_per_s = model, results_topic, rate_per_s
        self.client, self.http, self.producer, self.headers = client, http, producer, headers
        self.ledger = Ledger()
        self.in_flight: set[asyncio.Task[None]] = set()
        self._run_id = secrets.token_hex(3)
        self._numbers = itertools.count()

    def text(self) -> str:
        # A new text every time: each request is computed, not answered from the exact cache.
        return f"chaos {self._run_id} request {next(self._numbers)}: where is my parcel?"

    async def run(self, stop: asyncio.Event) -> None:
        """Send on schedule until `stop` is set; sends still in flight go on (see `in_flight`)."""
        interval = 1 / self.rate_per_s
        due = time.monotonic()
        for path in itertools.cycle(PATHS):
            if stop.is_set():
                return
            task = asyncio.create_task(self.send(path, self.ledger))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)
            due += interval
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(due - time.monotonic(), 0))
            except TimeoutError:
                pass

    async def send(self, path: str, ledger: Ledger) -> None:
        ledger.attempt()
        send: Callable[[Ledger], Any] = {"http-infer": self._http_infer, "http-submit": self._http_submit,
                                         "client": self._client, "pipeline": self._pipeline}[path]
        try:
            await send(ledger)
        except Exception as exc:  # one failed send is a refused request in the table, not the end of the run
            ledger.refuse(path, type(exc).__name__)

    async def _post(self, ledger: Ledger, path: str, route: str, body: dict[str, Any]) -> tuple[str | None, str]:
        """POST `body`; the request id the gateway named (200, 202 and 504 name one) and the result's
        status where the answer is a result. No id: a refused request."""
        timeout_s = int(body["timeout_ms"]) / 1000 + HTTP_CLIENT_SLACK_S
        try:
            response = await self.http.post(f"/v1/models/{self.model}/{route}", json=body, headers=self.headers,
                                            timeout=timeout_s)
        except httpx.HTTPError as exc:
            ledger.refuse(path, type(exc).__name__)
            return None, ""
        if response.status_code >= 500:
            ledger.http_5xx += 1
        answer = _json(response)
        request_id = answer.get("id")
        if request_id is None:
            ledger.refuse(path, str(response.status_code))
        return request_id, str(answer.get("status", "")) if response.status_code == 200 else ""

    async def _http_infer(self, ledger: Ledger) -> None:
        request_id, status = await self._post(ledger, "http-infer", "infer",
                                              {"text": self.text(), "timeout_ms": INFER_TIMEOUT_MS})
        if request_id is not None:
            ledger.accept(request_id, "http-infer")  # a 504 names an id too: published, so still owed
            if status:
                ledger.answer(request_id, status, "http", time.monotonic())

    async def _http_submit(self, ledger: Ledger) -> None:
        body = {"text": self.text(), "timeout_ms": SUBMIT_TIMEOUT_MS, "results_topic": self.results_topic}
        request_id, _ = await self._post(ledger, "http-submit", "requests", body)
        if request_id is not None:
            ledger.accept(request_id, "http-submit")

    async def _client(self, ledger: Ledger) -> None:
        try:
            result = await self.client.infer(self.model, self.text(), timeout=INFER_TIMEOUT_MS / 1000)
        except InferenceTimeout as exc:
            ledger.accept(exc.request_id, "client")  # published: the fleet owes it a result
            return
        ledger.accept(result.id, "client")
        ledger.answer(result.id, result.status.value, "redis-reply", time.monotonic())

    async def _pipeline(self, ledger: Ledger) -> None:
        request = pipeline_request(self.model, self.text(), self.results_topic)
        try:
            await self.producer.send_and_wait(requests_topic(self.model), request.encode(), key=request.id.encode())
        except KafkaError as exc:
            ledger.refuse("pipeline", type(exc).__name__)
            return
        ledger.accept(request.id, "pipeline")


def pipeline_request(model: str, text: str, results_topic: str) -> Request:
    """A request as any Kafka producer writes it (schemas/README.md): reply on a results topic only."""
    submitted = now_ms()
    return Request(id=new_request_id(), model=model, inputs={"text": text}, reply=ReplyTo(topic=results_topic),
                   deadline_ms=submitted + PIPELINE_DEADLINE_MS, submitted_ms=submitted)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        document = response.json()
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}
