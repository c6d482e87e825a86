"""The prepared requests of `scripts/bench gateway` per route: /v1's JSON, and the Open Inference
Protocol's infer with one text as a BYTES element, in JSON and in Triton's binary tensor
extension (as tritonclient.http sends it: no Content-Type, Inference-Header-Content-Length, the
output asked for in binary)."""

from __future__ import annotations

import json
import struct

from fleet_dev.bench.http_load import post_bytes, post_raw

ROUTES = ("/v1", "OIP JSON", "OIP binary")


def oip_json(text: str) -> dict[str, object]:
    return {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [text]}],
            "outputs": [{"name": "embedding", "parameters": {"binary_data": False}}]}


def oip_binary(text: str) -> tuple[bytes, int]:
    element = text.encode()
    data = struct.pack("<I", len(element)) + element
    header = json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(data)}}],
                         "outputs": [{"name": "embedding", "parameters": {"binary_data": True}}]}).encode()
    return header + data, len(header)


def route_requests(route: str, host: str, model: str, texts: list[str], headers: dict[str, str]) -> list[bytes]:
    if route == "/v1":
        return [post_bytes(host, f"/v1/models/{model}/infer", {"text": text}, headers) for text in texts]
    path = f"/v2/models/{model}/infer"
    if route == "OIP JSON":
        return [post_bytes(host, path, oip_json(text), headers) for text in texts]
    requests = []
    for text in texts:
        body, header_length = oip_binary(text)
        requests.append(post_raw(host, path, body, {**headers, "Inference-Header-Content-Length": str(header_length)}))
    return requests
