"""What the shadow worker and the shadow replay share: their clients, their versions and the engine
that compares a batch (workers/shadow/engine.py); they differ only in how they read records."""

from aiokafka import AIOKafkaProducer

from common.redis_cluster import AnyRedis
from common.credentials import verify_credentials
from common.startup import open_clients
from schemas.names import comparisons_topic
from workers.membership import KafkaMember
from workers.shadow.engine import BackendCache, BackendLoader, ShadowEngine, ShadowMetrics
from workers.shadow.settings import ShadowSettings


class ShadowMember(KafkaMember):
    def __init__(self, settings: ShadowSettings, *, redis: AnyRedis | None = None,
                 producer: AIOKafkaProducer | None = None, backends: BackendLoader | None = None,
                 metrics: ShadowMetrics | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.topics = settings.lane_plan.topics(settings.model)  # the live shadow reads every lane
        self.topic = self.topics[0]  # a replay's offsets are one topic's: the first lane's
        self.metrics = metrics if metrics is not None else ShadowMetrics()
        self.backends = BackendCache(settings, backends)
        self._redis = redis
        self._producer = producer
        self._engine: ShadowEngine | None = None

    @property
    def engine(self) -> ShadowEngine:
        if self._engine is None:
            raise RuntimeError(f"{self.what} not started")
        return self._engine

    async def _open_engine(self) -> ShadowEngine:
        """Its topics are the requests and the comparisons; a shadow never delivers results."""
        await verify_credentials(self.settings)
        redis, producer = await open_clients(
            self.settings, self._exit, self._redis, self._producer, partitions=self.settings.partitions, linger_ms=5,
            topics=[*self.topics, comparisons_topic(self.settings.model)], what="shadow")
        self._engine = ShadowEngine(self.settings, redis, producer, self.backends, self.metrics)
        return self._engine
