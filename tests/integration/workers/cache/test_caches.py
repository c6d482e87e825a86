"""The exact and semantic caches in serving workers, against the real Kafka and Redis."""

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from common.settings import FleetSettings
from gateway.client import FleetClient
from schemas.names import semantic_bounds_index_key, semantic_cache_topic, versions_key
from schemas.wire import CacheTier, ReplyTo, Status
from tests.integration.conftest import MODEL
from tests.integration.versions.test_versions import send_in_order, results_of, until
from models.backends.base import Backend
from models.loading import ModelLoader
from workers.cache.exact import clear_model_cache, pack_outputs
from workers.cache.learned_bound import labels_needed
from workers.cache.semantic_log import SemanticEntry, SemanticLog
from workers.cache.guards import meaning_conflict
from workers.cache.semantic import SemanticCache
from workers.cache.verifier import CacheVerifier
from workers.worker import Worker
from models.registry import ModelRegistry
from workers.settings import WorkerSettings

FAQ = "faq-intent"
FAQ_MULTILINGUAL = "faq-intent-multilingual"
MULTILINGUAL_VERIFIER = "cache-verifier-multilingual"
SEEDS = ["How do I reset my password?", "Will I be charged if I cancel during the trial?",
         "Can I cancel within 24 hours of ordering?"]
PARAPHRASE = "How can I reset my password?"  # cosine 0.98 to the first seed (INT8 MiniLM)
NEAR_MISSES = ["Will I not be charged if I cancel during the trial?",  # 0.985, negation
               "Can I cancel within 48 hours of ordering?"]  # 0.972, number


@pytest.fixture
async def cleared(redis: Redis) -> AsyncIterator[None]:
    """Start and end on a new cache generation: entries of other tests and runs are never read."""
    for model in (MODEL, FAQ, FAQ_MULTILINGUAL):
        await clear_model_cache(redis, model, None)
    yield
    for model in (MODEL, FAQ, FAQ_MULTILINGUAL):
        await clear_model_cache(redis, model, None)
    await redis.delete(versions_key(MODEL))


def faq_settings(**overrides: object) -> WorkerSettings:
    settings = WorkerSettings(model=FAQ, max_batch_size=32, max_queue_delay_ms=10, session_timeout_ms=6000,
                              semantic_cache=True, exact_cache=False, semantic_verify_fraction=0.0,
                              semantic_only_when_paying=False)  # look up every batch, paying or not
    return settings.model_copy(update=overrides)


class Serving:
    def __init__(self, settings: WorkerSettings, backend: Backend | None = None) -> None:
        self.worker = Worker(settings, backend=backend)

    async def __aenter__(self) -> Worker:
        await self.worker.start()
        self._task = asyncio.create_task(self.worker.run())
        return self.worker

    async def __aexit__(self, *exc_info: object) -> None:
        self.worker.request_stop()
        await self._task
        await self.worker.stop()


async def test_an_exact_hit_is_identical_shared_through_redis_and_missed_after_a_version_switch(
        client: FleetClient, redis: Redis, cleared: None, worker_settings: WorkerSettings, backend: Backend) -> None:
    settings = worker_settings.model_copy(update={"exact_cache": True, "pointer_poll_s": 0.05})
    text = f"exact cache check {uuid.uuid4().hex}"
    async with Serving(settings, backend) as worker:
        computed = await client.infer(MODEL, text, timeout=30)
        repeated = await client.infer(MODEL, text, timeout=30)
    assert computed.cache is CacheTier.miss and repeated.cache is CacheTier.exact
    assert repeated.outputs == computed.outputs and repeated.version == computed.version
    assert worker.metrics.cache.hits.labels(model=MODEL, tier="local")._value.get() == 1

    int8 = ModelRegistry(settings.registry_dir).resolve(MODEL, precision="int8").id
    async with Serving(settings, backend) as second:  # a new process: its in-process tier is empty
        from_redis = await client.infer(MODEL, text, timeout=30)
        await redis.hset(versions_key(MODEL), mapping={"stable": int8})
        await until(lambda: second.backend.manifest.id == int8)
        after_switch = await client.infer(MODEL, text, timeout=30)
    assert from_redis.cache is CacheTier.exact and from_redis.outputs == computed.outputs
    assert second.metrics.cache.hits.labels(model=MODEL, tier="redis")._value.get() == 1
    assert after_switch.cache is CacheTier.miss and after_switch.version == int8


async def test_identical_inputs_in_one_batch_are_computed_once(client: FleetClient, cleared: None,
                                                               worker_settings: WorkerSettings, backend: Backend) -> None:
    settings = worker_settings.model_copy(update={"exact_cache": True})
    text = f"the same question {uuid.uuid4().hex}"
    async with Worker(settings, backend=backend) as worker:
        await worker.run(burst=True)
        before = worker.computed
        requests = [client.build_request(MODEL, text, timeout=60, reply=ReplyTo()) for _ in range(10)]
        await send_in_order(client, requests)
        await worker.run(burst=True)
        results = await results_of(client, requests)
    assert all(r.status is Status.ok and r.outputs == results[0].outputs for r in results)
    assert worker.computed - before == 1
    assert worker.metrics.cache.dedupe.labels(model=MODEL)._value.get() == 9


async def test_a_paraphrase_hits_a_negation_or_number_change_does_not(client: FleetClient, cleared: None) -> None:
    async with Serving(faq_settings()):
        seeded = [await client.infer(FAQ, text, timeout=30) for text in SEEDS]
        paraphrase = await client.infer(FAQ, PARAPHRASE, timeout=30)
        near_misses = [await client.infer(FAQ, text, timeout=30) for text in NEAR_MISSES]
    assert all(r.cache is CacheTier.miss for r in seeded)
    assert paraphrase.cache is CacheTier.semantic
    assert paraphrase.similarity is not None and paraphrase.similarity >= 0.9
    assert paraphrase.outputs is not None and seeded[0].outputs is not None
    assert paraphrase.outputs["label"] == seeded[0].outputs["label"] == "reset_password"
    assert [r.cache for r in near_misses] == [CacheTier.miss, CacheTier.miss]


async def test_a_worker_started_later_serves_entries_another_one_published(client: FleetClient, cleared: None) -> None:
    async with Serving(faq_settings()):
        await client.infer(FAQ, SEEDS[0], timeout=30)
    async with Serving(faq_settings()) as later:
        paraphrase = await client.infer(FAQ, PARAPHRASE, timeout=30)
    assert paraphrase.cache is CacheTier.semantic
    assert paraphrase.worker == later.worker_id


async def test_verified_false_hits_raise_the_threshold(client: FleetClient, redis: Redis, stack: FleetSettings,
                                                      cleared: None) -> None:
    # The cosine threshold's own self-tuning: no verifier (it would judge the poisoned entry by its text).
    settings = faq_settings(semantic_verify_fraction=1.0, semantic_min_verifications=3, semantic_verifier=False)
    version = ModelRegistry(settings.registry_dir).resolve(FAQ, precision=settings.precision).id
    encoder = ModelLoader(WorkerSettings(model="minilm-embed", precision="int8").runtime()).load()
    generation = int(await redis.get(f"fleet:cachegen:{FAQ}") or 0)
    # A wrong answer in the shared log, as a bad entry or a drifted model would leave it.
    wrong = SemanticEntry(SEEDS[0], encoder.infer([SEEDS[0]])[0], pack_outputs({"label": "delete_account"}),
                          generation)
    poisoned = SemanticCache(encoder.manifest.embedding_dim)
    async with SemanticLog(poisoned, settings=stack, topic=semantic_cache_topic(FAQ, version),
                           producer=client.producer) as log:
        await log.publish([wrong])
    async with Serving(settings) as worker:
        answers = [await client.infer(FAQ, PARAPHRASE, timeout=30) for _ in range(4)]
        assert worker.caches.semantic is not None
        cache = worker.caches.semantic.cache_of(version)
    assert all(a.outputs is not None and a.outputs["label"] == "reset_password" for a in answers), \
        "a verified hit must answer with what the model computed"
    assert cache is not None and cache.false_hit_rate > settings.semantic_false_hit_budget
    assert cache.threshold > settings.semantic_threshold or not cache.enabled
    assert worker.metrics.cache.semantic_threshold.labels(model=FAQ, version=version)._value.get() == cache.threshold


NEGATION_SEED = "Is the clinic open on Sundays?"
# No "not", no negating prefix, no listed opposite ("shut" is not one): the guards pass it (cosine 0.90),
# the verifier reads it (P(same) 0.003).
NEGATION_TRAP = "Does the clinic shut on Sundays?"


async def test_the_verifier_refuses_a_negation_trap_the_guards_pass(client: FleetClient, cleared: None) -> None:
    settings = faq_settings()
    verifier = CacheVerifier.newest(ModelRegistry(settings.registry_dir))
    if verifier is None:
        pytest.skip("no cache-verifier built; run scripts/build-models")
    assert meaning_conflict(NEGATION_TRAP, NEGATION_SEED) is None
    async with Serving(settings) as worker:
        seeded = await client.infer(FAQ, NEGATION_SEED, timeout=30)
        trap = await client.infer(FAQ, NEGATION_TRAP, timeout=30)
        assert worker.caches.semantic is not None and worker.caches.semantic.verifier is not None
        judged = worker.metrics.cache.verifier_candidates.labels(model=FAQ, accepted="false")._value.get()
    assert seeded.cache is CacheTier.miss
    assert trap.cache is CacheTier.miss, "the verifier must refuse the cached answer to the opposite question"
    assert judged >= 1, "the trap reached the verifier: cosine and guards alone would have served it"


# MiniLM reads both as mostly [UNK]: "[UNK] 天 天 [UNK] [UNK] [UNK] [UNK]" and "[UNK] [UNK] 天 [UNK] ...".
CHINESE_SEED, CHINESE_TRAP = "今天可以退款吗", "今天不可以退款吗"


async def test_a_chinese_negation_trap_is_refused_when_the_encoder_cannot_read_chinese(client: FleetClient,
                                                                                       cleared: None) -> None:
    # Neither the verifier nor a cosine floor: on unknown tokens alone, the two texts look alike.
    settings = faq_settings(semantic_verifier=False, semantic_threshold=0.55)
    async with Serving(settings) as worker:
        seeded = await client.infer(FAQ, CHINESE_SEED, timeout=30)
        trap = await client.infer(FAQ, CHINESE_TRAP, timeout=30)
        english = await client.infer(FAQ, SEEDS[0], timeout=30)
        paraphrase = await client.infer(FAQ, PARAPHRASE, timeout=30)
        unreadable = worker.metrics.cache.semantic_unreadable.labels(model=FAQ)._value.get()
        assert worker.caches.semantic is not None
        version = ModelRegistry(settings.registry_dir).resolve(FAQ, precision=settings.precision).id
        cache = worker.caches.semantic.cache_of(version)
    assert seeded.cache is CacheTier.miss and trap.cache is CacheTier.miss
    assert unreadable == 2, "both Chinese texts were counted as unreadable"
    assert cache is not None and cache.entries == 1, "only the English text was cached"
    assert english.cache is CacheTier.miss and paraphrase.cache is CacheTier.semantic, "English still hits"


async def test_with_an_encoder_that_reads_chinese_the_english_verifier_still_refuses_what_it_cannot_read(
        client: FleetClient, cleared: None) -> None:
    settings = faq_settings(model=FAQ_MULTILINGUAL, semantic_encoder_model="e5-embed",
                            semantic_verifier_model="cache-verifier")
    registry = ModelRegistry(settings.registry_dir)
    if not registry.versions(FAQ_MULTILINGUAL) or CacheVerifier.newest(registry) is None:
        pytest.skip("faq-intent-multilingual or the cache-verifier not built; run scripts/build-models")
    async with Serving(settings) as worker:
        seeded = await client.infer(FAQ_MULTILINGUAL, CHINESE_SEED, timeout=60)
        trap = await client.infer(FAQ_MULTILINGUAL, CHINESE_TRAP, timeout=60)
        parcel = await client.infer(FAQ_MULTILINGUAL, "我的快递到哪了？", timeout=60)
        unreadable = worker.metrics.cache.semantic_unreadable.labels(model=FAQ_MULTILINGUAL)._value.get()
        assert worker.caches.semantic is not None
        cache = worker.caches.semantic.cache_of(registry.resolve(FAQ_MULTILINGUAL, precision=settings.precision).id)
    assert seeded.cache is CacheTier.miss and trap.cache is CacheTier.miss, "the negation trap is computed"
    assert cache is not None and cache.entries == 3, "e5-embed reads Chinese: every text was cached"
    assert unreadable >= 1, "the trap reached the verifier, which could not read it and did not judge it"
    assert parcel.outputs is not None and parcel.outputs["label"] == "track_order"


# The article's own example of a semantic hit, and the trap beside it.
WEATHER, WEATHER_PARAPHRASE, WEATHER_TOMORROW = "今天天气怎么样", "今天天气如何", "明天天气怎么样"


async def test_at_the_shipped_defaults_a_chinese_model_serves_the_articles_paraphrase_and_refuses_its_traps(
        client: FleetClient, cleared: None) -> None:
    """Nothing named: the worker reads with e5-embed (faq-intent-multilingual's tokenizer) and the
    verifier trained through it."""
    settings = faq_settings(model=FAQ_MULTILINGUAL)
    registry = ModelRegistry(settings.registry_dir)
    if not registry.versions(FAQ_MULTILINGUAL) or CacheVerifier.newest(registry, name=MULTILINGUAL_VERIFIER) is None:
        pytest.skip("faq-intent-multilingual or cache-verifier-multilingual not built; run scripts/build-models")
    async with Serving(settings) as worker:
        asked = [await client.infer(FAQ_MULTILINGUAL, text, timeout=60)
                 for text in (WEATHER, WEATHER_PARAPHRASE, WEATHER_TOMORROW, CHINESE_SEED, CHINESE_TRAP)]
        assert worker.caches.semantic is not None and worker.caches.semantic.verifier is not None
        judge = worker.caches.semantic.verifier.manifest.name
        cache = worker.caches.semantic.cache_of(registry.resolve(FAQ_MULTILINGUAL, precision=settings.precision).id)
        unreadable = worker.metrics.cache.semantic_unreadable.labels(model=FAQ_MULTILINGUAL)._value.get()
        refused = worker.metrics.cache.verifier_candidates.labels(model=FAQ_MULTILINGUAL, accepted="false")._value.get()
    assert judge == MULTILINGUAL_VERIFIER
    assert cache is not None and cache.entries == 4, "e5-embed read and cached every text the model computed"
    assert [answer.cache for answer in asked] == [CacheTier.miss, CacheTier.semantic, CacheTier.miss, CacheTier.miss,
                                                  CacheTier.miss], "only the paraphrase is served from the cache"
    assert unreadable == 0 and refused >= 2, "the verifier read the traps and refused them"


# From the Chinese stream bench: the verifier scores the question against the cached "turn it off" at
# 0.99 and against "turn it on" at 0.95; the model answers the two apart. Served, it was a wrong answer.
TURN_OFF_2FA, TURN_ON_2FA, WANTS_2FA_ON = "怎样给账户关闭两步验证", "怎样开启两步验证", "怎样让账号更安全，想启用两步验证"


async def test_where_likely_candidates_answer_differently_the_model_decides(client: FleetClient, cleared: None) -> None:
    settings = faq_settings(model=FAQ_MULTILINGUAL)
    registry = ModelRegistry(settings.registry_dir)
    if not registry.versions(FAQ_MULTILINGUAL) or CacheVerifier.newest(registry, name=MULTILINGUAL_VERIFIER) is None:
        pytest.skip("faq-intent-multilingual or cache-verifier-multilingual not built; run scripts/build-models")
    async with Serving(settings) as worker:
        cached = [await client.infer(FAQ_MULTILINGUAL, text, timeout=60) for text in (TURN_OFF_2FA, TURN_ON_2FA)]
        asked = await client.infer(FAQ_MULTILINGUAL, WANTS_2FA_ON, timeout=60)
        assert worker.caches.semantic is not None and worker.caches.semantic.verifier is not None
        verifier = worker.caches.semantic.verifier
        ambiguous = worker.metrics.cache.semantic_ambiguous.labels(model=FAQ_MULTILINGUAL)._value.get()
    assert [answer.cache for answer in cached] == [CacheTier.miss, CacheTier.miss]
    assert [answer.outputs and answer.outputs["label"] for answer in cached] == ["disable_2fa", "enable_2fa"]
    scores = verifier.score([(WANTS_2FA_ON, TURN_OFF_2FA), (WANTS_2FA_ON, TURN_ON_2FA)]).scores
    assert max(scores) >= verifier.threshold and min(scores) >= 0.5, "without the rule the best one would be served"
    assert asked.cache is CacheTier.miss and ambiguous == 1
    assert asked.outputs is not None and asked.outputs["label"] == "enable_2fa"


async def test_a_learned_bound_serves_nothing_cold_and_serves_once_recomputed_answers_allow(
        client: FleetClient, redis: Redis, cleared: None) -> None:
    delta = 0.25
    settings = faq_settings(semantic_verifier=False, semantic_max_wrong_rate=delta)
    pattern = f"fleet:semantic-bound:{FAQ}:*"
    for key in [key async for key in redis.scan_iter(match=pattern)]:
        await redis.delete(key)
    needed = labels_needed(delta)
    async with Serving(settings) as worker:
        seeded = await client.infer(FAQ, SEEDS[0], timeout=30)
        # Each miss whose best candidate the bound refused is computed anyway: a free label. The counts are
        # shared (and the threshold learnt again) once a second, so the first hit comes a little after `needed`.
        answers = []
        for _ in range(needed + 300):
            answers.append(await client.infer(FAQ, PARAPHRASE, timeout=30))
            if answers[-1].cache is CacheTier.semantic:
                break
        right = worker.metrics.cache.semantic_labels.labels(model=FAQ, right="true")._value.get()
        wrong = worker.metrics.cache.semantic_labels.labels(model=FAQ, right="false")._value.get()
    keys = [key async for key in redis.scan_iter(match=pattern)]
    shared = {k.decode(): v.decode() for k, v in (await redis.hgetall(keys[0])).items()} if len(keys) == 1 else {}
    for key in keys:
        await redis.delete(key)
    await redis.delete(semantic_bounds_index_key(FAQ))
    assert seeded.cache is CacheTier.miss
    assert answers[0].cache is CacheTier.miss, "a cold bound serves nothing, however close the candidate"
    assert answers[-1].cache is CacheTier.semantic, "enough right labels let the bound serve"
    assert sum(a.cache is CacheTier.miss for a in answers) >= needed, "no hit before the labels allow"
    assert all(a.outputs is not None and a.outputs["label"] == "reset_password" for a in answers)
    assert right >= needed and wrong == 0
    assert sum(int(v) for k, v in shared.items() if k.startswith("n:")) >= needed, "labels are shared through Redis"
    assert float(shared["delta"]) == delta, "with the parameters they were learnt under (the console reads them)"


async def test_an_embedding_model_never_gets_a_semantic_cache(worker_settings: WorkerSettings,
                                                              backend: Backend) -> None:
    async with Worker(worker_settings.model_copy(update={"semantic_cache": True}), backend=backend) as worker:
        assert worker.caches.semantic is None
