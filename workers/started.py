"""What a started worker is made of, as its stages and its tests reach it: the worker's accessors,
each raising "worker not started" before `start()` (workers/worker.py holds the life cycle)."""

from aiokafka import AIOKafkaProducer

from common.redis_cluster import AnyRedis
from models.backends.base import Backend
from workers.assembly import WorkerParts
from workers.batching.sizing import BatchSizing
from workers.cache.batch import BatchCaches
from workers.health.supervisor import Supervisor
from workers.observability.tracing import DebugTracer
from workers.serving.model_set import ModelSet


class StartedWorker:
    _parts: WorkerParts | None
    _backend: Backend | None
    _unavailable: str | None
    _redis: AnyRedis | None
    _producer: AIOKafkaProducer | None

    @property
    def parts(self) -> WorkerParts:
        if self._parts is None:
            raise RuntimeError("worker not started")
        return self._parts

    @property
    def backend(self) -> Backend:
        """The stable version: what unpinned traffic gets outside a rollout."""
        if self._parts is not None:
            return self._parts.models.serving.stable
        if self._backend is None:
            raise RuntimeError("worker not started")
        return self._backend

    @property
    def models(self) -> ModelSet:
        """The resident versions and which of them serve (see workers/serving/model_set.py)."""
        return self.parts.models

    @property
    def caches(self) -> BatchCaches:
        return self.parts.caches

    @property
    def tracer(self) -> DebugTracer:
        return self.parts.tracer

    @property
    def supervisor(self) -> Supervisor:
        return self.parts.supervisor

    @property
    def sizing(self) -> BatchSizing:
        return self.parts.sizing

    @property
    def unavailable(self) -> str | None:
        """Why the worker could not load its model on its device, or None."""
        return self._unavailable

    @property
    def redis(self) -> AnyRedis:
        if self._redis is None:
            raise RuntimeError("worker not started")
        return self._redis

    @property
    def producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise RuntimeError("worker not started")
        return self._producer
