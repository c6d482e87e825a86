"""The `inputs` of a /v1 request, built from its JSON body as the model's task reads them.

The gateway knows a model's task from its model card (schemas/model_card.py, written by the
workers that serve it). Text tasks take `text`; `rerank` takes `query` and `passages`; a
`tensor` model takes `inputs`, one JSON tensor per model input (a nested array, or
`{"shape": [...], "data": [...]}`), checked against the card and sent as little-endian bytes.
Whatever the model would refuse is a 422 naming the field, before anything is published. A
text body for a model without a card (no worker has served it yet) goes out as it always did; a
card that is there but cannot be read is a 503 saying so, never a guess.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from common.model_cards import CardsUnavailable, CardUnreadable, ModelCards
from gateway.body import InferBody, invalid
from gateway.errors import FleetUnavailable
from schemas.model_card import ModelCard
from schemas.task_inputs import check_inputs
from schemas.tasks import is_text_task
from schemas.tensors import array_from_json, check_tensors, encode_tensor
from schemas.wire import WireError


def _problem(exc: WireError) -> Exception:
    # "inputs.x: ..." -> loc ("inputs", "x"), the message as the wire says it
    field, _, message = str(exc).partition(": ")
    return invalid((tuple(field.split(".", 1)), message or str(exc)))


async def inputs_of(cards: ModelCards, model: str, body: InferBody) -> dict[str, Any]:
    """The wire `inputs` for this body, or a 422 (503 while no worker has said what the model takes)."""
    try:
        card = await cards.get(model, body.version)
    except CardsUnavailable as exc:
        if body.text is not None:
            return {"text": body.text}  # a text request never waits on cards; the reply needs Redis anyway
        raise FleetUnavailable("redis", str(exc)) from None
    except CardUnreadable as exc:
        raise HTTPException(503, str(exc), headers={"Retry-After": "5"}) from None
    if card is None:
        if body.text is not None:
            return {"text": body.text}
        raise HTTPException(503, f"no worker has published what {model!r} takes yet (its model card); "
                                 "a text request is accepted meanwhile, tensors and passages are not")
    try:
        return _inputs_for(card, body)
    except WireError as exc:
        raise _problem(exc) from None


def _inputs_for(card: ModelCard, body: InferBody) -> dict[str, Any]:
    task = card.task
    if task == "rerank":
        inputs = body.inputs if body.inputs is not None else {"query": body.query, "passages": body.passages}
        check_inputs(task, inputs)
        return inputs
    if task == "tensor":
        if body.inputs is None:
            raise invalid((("inputs",), f"{card.name} is a tensor model: send inputs, one tensor per model "
                                        f"input ({[spec.name for spec in card.inputs]})"))
        return _tensors(card, body.inputs)
    if is_text_task(task):
        if body.text is None:
            raise invalid((("text",), f"{card.name} is a {task} model: a string is required"))
        return {"text": body.text}
    raise invalid((("inputs",), f"{card.name}'s task {task!r} is not served over /v1 by this gateway"))


def _tensors(card: ModelCard, inputs: dict[str, Any]) -> dict[str, Any]:
    specs = {spec.name: spec for spec in card.inputs}
    for name in inputs:
        if name not in specs:
            raise invalid((("inputs", name), f"not an input of this model; it takes {list(specs)}"))
    arrays = {name: array_from_json(name, value, specs[name]) for name, value in inputs.items()}
    check_tensors(arrays, card.inputs)
    return {name: encode_tensor(array) for name, array in arrays.items()}
