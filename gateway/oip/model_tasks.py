"""Which task answers a model version's calls (gateway/oip/tasks.py; built from a card by
gateway/oip/card_tasks.py): from the model card its workers write to Redis
(schemas/model_card.py, read through common/model_cards.py, cached 2 s), or, while a model has
no card (no worker has written one yet), from the `model_tasks` setting. A version pin without a
card is a version no worker serves: 404 before anything is published."""

from collections.abc import Callable

from redis.exceptions import RedisError

from common.model_cards import CardsUnavailable, ModelCards
from common.redis_cluster import AnyRedis
from gateway.oip.errors import Failure, OipError
from gateway.oip.card_tasks import card_task
from gateway.oip.tasks import Task, task_of
from schemas.model_card import ModelCard

MAX_TASKS = 1024  # tasks built from cards kept; as many as the card cache holds


class TaskBook:
    def __init__(self, models: list[str], model_tasks: dict[str, str], redis: Callable[[], AnyRedis],
                 retry_after_s: int) -> None:
        self._defaults = {model: task_of(model, model_tasks) for model in models}
        self._redis = redis
        self._retry_after_s = retry_after_s
        self._cards: ModelCards | None = None
        self._built: dict[tuple[str, str | None], tuple[ModelCard, Task | None]] = {}

    def check_known(self, model: str) -> None:
        if model not in self._defaults:
            raise OipError(Failure.not_found, f"unknown model {model[:80]!r}; this gateway serves "
                                              f"{sorted(self._defaults)}")

    async def card(self, model: str, version: str | None) -> ModelCard | None:
        self.check_known(model)
        if self._cards is None:
            self._cards = ModelCards(self._redis(), max_entries=MAX_TASKS)
        try:
            return await self._cards.get(model, version)
        except (CardsUnavailable, RedisError, OSError) as exc:
            if version is None:
                return None  # the setting's task stands while Redis cannot say
            raise OipError(Failure.unavailable, f"redis unavailable: {type(exc).__name__}",
                           retry_after_s=self._retry_after_s) from None

    async def task(self, model: str, version: str | None) -> Task:
        """The task of `model` (at `version`); 404 for an unknown model or a version no worker serves."""
        card = await self.card(model, version)
        if card is None:
            if version is not None:
                raise OipError(Failure.not_found, f"model {model[:80]!r} has no version {version[:80]!r} served now")
            return self._defaults[model]
        key = (model, version)
        built = self._built.get(key)
        if built is None or built[0] is not card:
            if len(self._built) >= MAX_TASKS:
                self._built.clear()
            built = self._built[key] = (card, card_task(card))
        if built[1] is None:
            raise OipError(Failure.bad_input, f"model {model[:80]!r} is a {card.task} model, which the Open "
                                              "Inference Protocol does not serve here yet; use /v1")
        return built[1]
