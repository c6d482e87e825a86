"""The /v2 routes in the gateway's OpenAPI document. They are served before FastAPI
(gateway/oip/rest.py), so FastAPI cannot see them; their paths are added to what it generates."""

from typing import Any

from fastapi import FastAPI

KEYS = [{"HTTPBearer": []}, {"APIKeyHeader": []}]
ERROR = {"content": {"application/json": {"schema": {"type": "object", "properties": {
    "error": {"type": "string"}, "ids": {"type": "array", "items": {"type": "string"}}}}}}}
TENSOR = {"type": "object", "required": ["name", "shape", "datatype"], "properties": {
    "name": {"type": "string"}, "shape": {"type": "array", "items": {"type": "integer"}},
    "datatype": {"type": "string", "enum": ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                                            "INT64", "FP16", "FP32", "FP64", "BYTES"]},
    "parameters": {"type": "object"}, "data": {"type": "array", "items": {}}}}
INFER_BODY = {"type": "object", "required": ["inputs"], "properties": {
    "id": {"type": "string"}, "parameters": {"type": "object"}, "inputs": {"type": "array", "items": TENSOR},
    "outputs": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "parameters": {"type": "object"}}}}}}
ERRORS = {"400": {"description": "bad input; the message names the field", **ERROR},
          "401": {"description": "missing, unknown or revoked API key", **ERROR},
          "404": {"description": "unknown model or version", **ERROR},
          "413": {"description": "body too large", **ERROR},
          "429": {"description": "over the tenant's quota or the in-flight cap; see Retry-After", **ERROR},
          "503": {"description": "Kafka or Redis unavailable; see Retry-After", **ERROR}}
MODEL = "/v2/models/{model}"
VERSION = "/v2/models/{model}/versions/{version}"


def _get(summary: str, example: dict[str, Any], *, keyed: bool = True) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, "tags": ["Open Inference Protocol"], "responses": {
        "200": {"description": "OK", "content": {"application/json": {"example": example}}}}}
    if keyed:
        operation["security"] = KEYS
        operation["responses"].update({k: v for k, v in ERRORS.items() if k in ("401", "404", "429", "503")})
    return {"get": operation}


READINESS = {"name": "readiness", "in": "query", "required": False, "schema": {"type": "string", "enum": [
    "serving", "queued"], "default": "serving"}, "description": "serving: a live worker serves the stable version "
    "(the server: every model it serves); queued: calls are accepted now and wait in Kafka for a worker"}
NOT_READY = {"description": "not ready; `reason` says why", "content": {"application/json": {"example": {
    "name": "minilm-embed", "ready": False, "reason": "no live worker serves version minilm-embed-20261206-001 of "
    "minilm-embed"}}}}


def _ready(summary: str, example: dict[str, Any], *, keyed: bool = True) -> dict[str, Any]:
    route = _get(summary, example, keyed=keyed)
    route["get"]["parameters"] = [READINESS]
    route["get"]["responses"]["503"] = NOT_READY
    return route


def _infer() -> dict[str, Any]:
    return {"post": {"summary": "Infer: one request row per element of the BYTES input, answered after all rows "
                                "(JSON, or Triton's binary tensor extension with Inference-Header-Content-Length)",
                     "tags": ["Open Inference Protocol"], "security": KEYS,
                     "requestBody": {"required": True, "content": {"application/json": {"schema": INFER_BODY},
                                                                   "application/octet-stream": {}}},
                     "responses": {"200": {"description": "the outputs", "content": {"application/json": {}}},
                                   **ERRORS, "504": {"description": "deadline passed; `ids` lists the rows' "
                                                                    "request ids (GET /v1/results/{id})", **ERROR}}}}


def oip_paths() -> dict[str, Any]:
    paths: dict[str, Any] = {
        "/v2": _get("Server metadata", {"name": "kafka-inference-fleet", "version": "1",
                                        "extensions": ["binary_tensor_data", "classification"]}, keyed=False),
        "/v2/health/live": _get("Server live", {"live": True}, keyed=False),
        "/v2/health/ready": _ready("Server ready: every model it serves is (503 with the reason when not)",
                                   {"ready": True}, keyed=False)}
    for base in (MODEL, VERSION):
        paths[base] = _get("Model metadata: inputs and outputs with datatypes and shapes (-1: variable)",
                           {"name": "minilm-embed", "versions": [], "platform": "kafka-inference-fleet",
                            "inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1]}],
                            "outputs": [{"name": "embedding", "datatype": "FP32", "shape": [-1, -1]}]})
        paths[base + "/ready"] = _ready("Model ready: a live worker serves its stable version (or this version)",
                                        {"name": "minilm-embed", "ready": True})
        paths[base + "/infer"] = _infer()
    return paths


def install_openapi(app: FastAPI) -> None:
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            schema.setdefault("paths", {}).update(oip_paths())
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
