"""The body of an infer or submit request, read strictly: JSON in UTF-8, an object, every value
inside the bounds msgpack and the workers take, every field checked. Anything else is a 4xx
that names the field, never an exception further down."""

import json
import re
from dataclasses import dataclass
from email.message import Message
from typing import Any

import msgpack
import orjson
from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.bounds import JsonBounds, Path, bound_problems, dotted
from schemas.results_topics import results_topic_problem
from gateway.settings import GatewaySettings


class InferBody(BaseModel):
    # Strict: "3" is not a priority and 1.0 is not a timeout; the wire contract is just as strict.
    model_config = ConfigDict(strict=True, extra="ignore")

    text: str | None = Field(None, description="Input text (embedding, classification, token-classification)")
    query: str | None = Field(None, description="rerank: the query the passages are scored against")
    passages: list[str] | None = Field(None, description="rerank: the passages to score, in order")
    inputs: dict[str, Any] | None = Field(None, description="tensor: one JSON tensor per model input, a nested "
                                          "array or {\"shape\": [...], \"data\": [...]}")
    params: dict[str, Any] = Field(default_factory=dict, description="Options that change the output")
    version: str | None = Field(None, pattern=r"^[\x21-\x7e]{1,128}$", description="Pin a model version")
    timeout_ms: int | None = Field(None, gt=0, le=600_000, description="Deadline from now; default from settings")
    priority: int = Field(0, ge=0, le=9)
    tenant: str | None = Field(None, min_length=1, max_length=128)
    results_topic: str | None = Field(None, description="Also produce the result to this Kafka topic (async submit)")


@dataclass(frozen=True)
class BodyRules:
    bounds: JsonBounds
    max_params_bytes: int
    max_text_chars: int
    max_timeout_ms: int
    results_topics: re.Pattern[str]

    @classmethod
    def of(cls, settings: GatewaySettings) -> "BodyRules":
        return cls(JsonBounds(settings.max_params_depth), settings.max_params_bytes, settings.max_text_chars,
                   settings.max_timeout_ms, re.compile(settings.results_topic_pattern))


def invalid(*problems: tuple[Path, str]) -> RequestValidationError:
    return RequestValidationError([{"loc": ("body", *path), "msg": f"{dotted(path)}: {message}",
                                    "type": "value_error"} for path, message in problems])


# Content types that need no parsing to be known as JSON.
PLAIN_JSON = frozenset({None, "application/json"})
# A run of this many digits may be an integer outside int64, which orjson reads as a float.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")
_UNREAD = object()


def _quick_document(raw: bytes) -> Any:
    """orjson's reading of `raw` where it is the standard library's too, else `_UNREAD`.

    orjson reads JSON text ~5x faster, and what it takes it reads as `json.loads` does, but for
    integers beyond 64 bits, which it turns into floats: the bounds must see those as integers
    (outside int64, a 422 naming the field), so a body with a long digit run goes the slow way.
    What orjson refuses (NaN, lone surrogates, numbers that overflow, bytes that are not JSON)
    goes the slow way too, to be taken or refused with the standard library's own message."""
    if _LONG_DIGITS.search(raw) is not None:
        return _UNREAD
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _UNREAD


def _is_json(content_type: str | None) -> bool:
    if not content_type:
        return True  # what FastAPI assumes too: curl -d without a header still works
    message = Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def parse_document(raw: bytes, content_type: str | None) -> Any:
    """The JSON value in `raw`: 415 for another content type, 400 for bytes that are not JSON text."""
    if content_type not in PLAIN_JSON and not _is_json(content_type):
        raise HTTPException(415, f"content-type: expected application/json, got {content_type[:100]!r}")
    if (document := _quick_document(raw)) is not _UNREAD:
        return document
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(400, f"body: not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise HTTPException(400, "body: JSON nested too deeply to parse") from None
    except json.JSONDecodeError as exc:
        raise HTTPException(400, f"body: not JSON: {str(exc)[:200]}") from None
    except ValueError:  # Python's own message names its settings, which are none of the caller's business
        raise HTTPException(400, "body: a number has too many digits") from None


def _texts(body: InferBody) -> list[tuple[Path, str]]:
    """The texts besides `text` a body carries (rerank's), each bounded like `text`."""
    texts: list[tuple[Path, str]] = [(("query",), body.query)] if body.query is not None else []
    return texts + [(("passages", index), passage) for index, passage in enumerate(body.passages or ())]


def _field_problems(body: InferBody, rules: BodyRules) -> list[tuple[Path, str]]:
    problems: list[tuple[Path, str]] = []
    if body.text is None and body.inputs is None and body.query is None:
        problems.append((("text",), "Field required (or, as the model's task takes them, query and passages, "
                                    "or inputs)"))
    for path, text in _texts(body):
        if len(text) > rules.max_text_chars:
            problems.append((path, f"{len(text)} characters is over the limit of {rules.max_text_chars}"))
    if body.text is not None and len(body.text) > rules.max_text_chars:
        problems.append((("text",), f"{len(body.text)} characters is over the limit of {rules.max_text_chars}"))
    if body.timeout_ms is not None and body.timeout_ms > rules.max_timeout_ms:
        problems.append((("timeout_ms",), f"{body.timeout_ms} is over this gateway's limit of {rules.max_timeout_ms}"))
    if body.results_topic is not None:
        if (problem := results_topic_problem(body.results_topic, rules.results_topics)) is not None:
            problems.append((("results_topic",), problem))
    packed = len(msgpack.packb(body.params, use_bin_type=True))
    if packed > rules.max_params_bytes:
        problems.append((("params",), f"{packed} bytes packed is over the limit of {rules.max_params_bytes}"))
    return problems


def parse_infer_body(raw: bytes, content_type: str | None, rules: BodyRules) -> InferBody:
    document = parse_document(raw, content_type)
    if not isinstance(document, dict):
        raise invalid(((), f"expected a JSON object, got {type(document).__name__}"))
    if problems := bound_problems(document, rules.bounds):
        raise invalid(*problems)
    try:
        body = InferBody.model_validate(document)
    except ValidationError as exc:
        raise RequestValidationError([{"loc": ("body", *error["loc"]), "msg": f"{dotted(error['loc'])}: {error['msg']}",
                                       "type": error["type"]} for error in exc.errors(include_url=False)]) from None
    if problems := _field_problems(body, rules):
        raise invalid(*problems)
    return body
