"""The protocol's operations on the fleet, for REST (gateway/oip/rest.py) and gRPC
(gateway/oip/grpc_server.py) alike: server and model metadata and readiness, and infer. It
validates, publishes and waits; it never runs a model. Failures are `OipError`s; a caller is
admitted before any of these runs (gateway/admission.py)."""

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from common.heartbeats import list_workers
from common.redis_cluster import REDIS_DOWN
from gateway.auth import Caller
from gateway.client import FleetClient, RequestOptions
from gateway.errors import FleetUnavailable, Overloaded
from gateway.metrics import GatewayMetrics
from gateway.oip.call import InferCall, Limits, OutputRequest
from gateway.oip.errors import Failure, OipError, bad_input
from gateway.oip.exchange import build_rows, exchange_rows
from gateway.catalog import ServedModels
from gateway.oip.model_tasks import TaskBook
from gateway.oip.tasks import OutputTensor, Row, Task
from gateway.readiness import ModelReadiness, Served
from gateway.refusals import Kind, Refusal, Refused
from gateway.settings import GatewaySettings
from schemas.wire import Result, Status

SERVER_NAME = "kafka-inference-fleet"
SERVER_VERSION = "1"
EXTENSIONS = ("binary_tensor_data", "classification")
PLATFORM = "kafka-inference-fleet"
# A worker's error result, as the failure the caller gets (anything else is the fleet's: 503).
RESULT_FAILURES = {"version_unavailable": Failure.not_found, "invalid_input": Failure.bad_input,
                   "invalid_fields": Failure.bad_input, "deadline_exceeded": Failure.deadline}


class Readiness(StrEnum):
    """What a ready route means (`?readiness=`): see `OipService.model_ready`."""

    serving = "serving"
    queued = "queued"


@dataclass(frozen=True, slots=True)
class Answer:
    model: str
    version: str
    id: str | None
    outputs: list[tuple[OutputTensor, bool]]  # each tensor, and whether it goes in binary
    request_ids: list[str]


def server_metadata() -> dict[str, Any]:
    return {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": list(EXTENSIONS)}


class OipService:
    def __init__(self, settings: GatewaySettings, fleet: FleetClient, metrics: GatewayMetrics,
                 models: ServedModels) -> None:
        self._settings = settings
        self._fleet = fleet
        self._metrics = metrics
        self._models = models
        self._tasks = TaskBook(models, settings.model_tasks, lambda: fleet.redis, settings.retry_after_s)
        self._readiness = ModelReadiness(lambda: fleet.redis, lambda: models.served)
        self.max_text_chars = settings.max_text_chars
        self.limits = Limits(max_elements=settings.oip_max_rows, max_element_bytes=settings.max_text_chars * 4,
                             max_timeout_ms=settings.max_timeout_ms)

    async def task(self, model: str, version: str | None) -> Task:
        return await self._tasks.task(model, version)

    def accepting(self) -> bool:
        """Whether calls are accepted and queued now: the gateway reads its replies from Redis."""
        try:
            return self._fleet.waiter.down_reason is None
        except RuntimeError:
            return False

    async def server_ready(self, readiness: Readiness = Readiness.serving) -> Served:
        """`serving` (what the protocol's clients expect, as Triton's strict readiness): calls are
        accepted and every model this gateway serves is ready; `queued`: calls are accepted."""
        if readiness is Readiness.queued or not self.accepting():
            return self._queued()
        if not self._models.read_once and self._models.allow_list is None:
            return Served(False, "the model catalogue has not been read from Redis yet")
        try:
            return await self._readiness.all_of(self._models.served)
        except REDIS_DOWN as exc:
            return Served(False, f"redis unavailable: {type(exc).__name__}")

    async def versions(self, model: str) -> list[str]:
        """The versions live workers of `model` serve now, from their heartbeats."""
        await self._tasks.check_known(model)
        try:
            workers = await list_workers(self._fleet.redis, model)
        except REDIS_DOWN as exc:
            raise OipError(Failure.unavailable, f"redis unavailable: {type(exc).__name__}",
                           retry_after_s=self._settings.retry_after_s) from None
        return sorted({worker.version for worker in workers if worker.state != "failed"})

    async def model_ready(self, model: str, version: str | None, readiness: Readiness = Readiness.serving) -> Served:
        """`serving`: a live worker serves the stable version (or `version`); `queued`: this gateway
        accepts and queues the model's calls (they wait for a worker)."""
        await self._tasks.check_known(model, version)
        if readiness is Readiness.queued:
            return self._queued()
        return await self._ready(model, version)

    def _queued(self) -> Served:
        return Served(True) if self.accepting() else Served(False, "replies cannot be read from Redis")

    async def _ready(self, model: str, version: str | None) -> Served:
        try:
            return await self._readiness.of(model, version)
        except REDIS_DOWN as exc:
            return Served(False, f"redis unavailable: {type(exc).__name__}")

    async def model_metadata(self, model: str, version: str | None) -> dict[str, Any]:
        card = await self._tasks.card(model, version)
        task = await self.task(model, version)
        versions = await self.versions(model)
        return {"name": model, "versions": versions, "platform": card.platform if card is not None else PLATFORM,
                "parameters": {"task": task.name},
                "inputs": [spec.metadata() for spec in task.inputs],
                "outputs": [spec.metadata() for spec in task.outputs]}

    @staticmethod
    def rows_of(task: Task, call: InferCall, max_chars: int) -> list[Row]:
        """The request rows of a call, checked against the model's task before anything is published."""
        texts = task.rows(call.inputs, max_chars)
        for wanted in call.outputs or ():
            if wanted.name not in task.mappers:
                raise bad_input(f"output {wanted.name[:80]!r}: this model's outputs are {sorted(task.mappers)}")
            if wanted.classification and wanted.name not in task.classifiable:
                raise bad_input(f"output {wanted.name[:80]!r}: the classification extension applies to a "
                                "classifier's outputs")
        return texts

    async def infer(self, model: str, version: str | None, task: Task, call: InferCall, texts: list[Row],
                    caller: Caller) -> Answer:
        started = time.perf_counter()
        timeout_s = call.timeout_ms / 1000 if call.timeout_ms else self._settings.default_timeout_s
        wanted = call.outputs or [OutputRequest(spec.name, call.binary_outputs, 0) for spec in task.outputs]
        # Outputs all in binary: an embedding comes back as raw float32 bytes (f32le) and goes out as is;
        # for JSON as floats, written as they came.
        binary = all(want.binary for want in wanted)
        options = RequestOptions(version=version, priority=call.priority, tenant=caller.tenant,
                                 embedding_encoding="f32le" if binary else None)
        rows = build_rows(self._fleet, model, texts, timeout_s, options)
        try:
            results = await exchange_rows(self._fleet, rows)
        except FleetUnavailable as exc:
            self._metrics.unavailable_of(exc.dependency).inc()
            raise OipError(Failure.unavailable, str(exc), retry_after_s=self._settings.retry_after_s) from None
        except Overloaded as exc:  # the reply waiter's bound: as busy as admission's in-flight bound, said alike
            raise Refused(Refusal(Kind.busy, str(exc), self._settings.retry_after_s)) from None
        _check_results(results)
        self._metrics.latency_of(model).observe(time.perf_counter() - started)
        outputs = [(task.output(want.name, results, want.classification, want.binary), want.binary) for want in wanted]
        return Answer(model, results[0].version or "", call.id, outputs, [row.id for row in rows])


def _check_results(results: list[Result]) -> None:
    """An error or expired result fails the call, with the ids of the rows that failed."""
    failed = [result for result in results if result.status in (Status.error, Status.expired)]
    if not failed:
        return
    first = failed[0]
    code = first.error.code if first.error is not None else "expired"
    failure = Failure.deadline if first.status == Status.expired else RESULT_FAILURES.get(code, Failure.unavailable)
    message = first.error.message if first.error is not None else "the deadline passed before compute"
    raise OipError(failure, f"{len(failed)} of {len(results)} rows failed ({code}): {message}",
                   tuple(result.id for result in failed), retry_after_s=1 if failure is Failure.unavailable else None)
