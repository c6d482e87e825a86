"""Which task answers a model version's calls (gateway/oip/tasks.py; built from a card by
gateway/oip/card_tasks.py): from the model card its workers write to Redis
(schemas/model_card.py, read through common/model_cards.py, cached 2 s), or, while a model has
no card (no worker has written one yet), from the `model_tasks` setting, for the models it names.

A model the setting does not name has no task until a worker writes its card: its calls are a 503
saying so, never another task's card (an imported tabular model once answered as a text
embedding). A card that is there but cannot be read is a 503 with the reason; a version pin
without a card is a version no worker serves: 404 before anything is published.
"""

from collections.abc import Callable

from redis.exceptions import RedisError

from common.model_cards import CardsUnavailable, CardUnreadable, ModelCards
from common.redis_cluster import AnyRedis
from gateway.catalog import CatalogueUnread, NotServed, ServedModels
from gateway.oip.errors import Failure, OipError
from gateway.oip.card_tasks import card_task
from gateway.oip.tasks import TASKS, Task
from schemas.model_card import ModelCard

MAX_TASKS = 1024  # tasks built from cards kept; as many as the card cache holds
NO_CARD_RETRY_S = 5


class TaskBook:
    def __init__(self, models: ServedModels, model_tasks: dict[str, str], redis: Callable[[], AnyRedis],
                 retry_after_s: int) -> None:
        self._models = models
        self._configured = {model: TASKS[task] for model, task in model_tasks.items() if task in TASKS}
        self._redis = redis
        self._retry_after_s = retry_after_s
        self._cards: ModelCards | None = None
        self._built: dict[tuple[str, str | None], tuple[ModelCard, Task | None]] = {}

    async def check_known(self, model: str, version: str | None = None) -> None:
        try:
            await self._models.check(model, version)
        except NotServed as exc:
            raise OipError(Failure.not_found, str(exc)) from None
        except CatalogueUnread as exc:
            raise OipError(Failure.unavailable, str(exc), retry_after_s=self._retry_after_s) from None

    async def card(self, model: str, version: str | None) -> ModelCard | None:
        """The card of `model` (at `version`); None while no worker has written one."""
        await self.check_known(model, version)
        if self._cards is None:
            self._cards = ModelCards(self._redis(), max_entries=MAX_TASKS)
        try:
            return await self._cards.get(model, version)
        except CardUnreadable as exc:
            raise OipError(Failure.unavailable, str(exc), retry_after_s=NO_CARD_RETRY_S) from None
        except (CardsUnavailable, RedisError, OSError) as exc:
            if version is None and model in self._configured:
                return None  # the setting's task stands while Redis cannot say
            raise OipError(Failure.unavailable, f"redis unavailable: {type(exc).__name__}",
                           retry_after_s=self._retry_after_s) from None

    async def task(self, model: str, version: str | None) -> Task:
        """The task of `model` (at `version`); 404 for an unknown model or a version no worker serves,
        503 while the model's task cannot be known."""
        card = await self.card(model, version)
        if card is None:
            if version is not None:
                raise OipError(Failure.not_found, f"model {model[:80]!r} has no version {version[:80]!r} served now")
            configured = self._configured.get(model)
            if configured is None:
                raise OipError(Failure.unavailable, f"no worker has written the card of {model[:80]!r} yet (what it "
                               "takes and gives), so its inputs are unknown: start a worker for it (fleet workers "
                               "start), or name its task in FLEET_MODEL_TASKS", retry_after_s=NO_CARD_RETRY_S)
            return configured()
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
