"""KServe's InferenceRESTClient against a fleet gateway, run as its own process by
test_oip_clients.py: the kserve package builds KServe's protobuf messages into the default
descriptor pool under the same names tritonclient.grpc uses (package `inference`), so the two
cannot be imported into one process. Prints what it saw as one JSON line.

    python -m tests.integration.gateway.oip_kserve_check <gateway url> <api key> <embed model> <classifier> <texts json>
"""

import asyncio
import json
import sys
import warnings
from typing import Any


async def check(url: str, key: str, embed: str, classify: str, texts: list[str]) -> dict[str, Any]:
    from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig

    headers = {"Authorization": f"Bearer {key}"}
    client = InferenceRESTClient(RESTConfig(protocol="v2", timeout=30))
    seen: dict[str, Any] = {}
    try:
        seen["live"] = await client.is_server_live(url)
        seen["ready"] = await client.is_server_ready(url)
        seen["model_ready"] = await client.is_model_ready(url, embed, headers=headers)
        tensor = InferInput(name="text", shape=[len(texts)], datatype="BYTES", data=texts)
        answer = await client.infer(url, InferRequest(model_name=embed, infer_inputs=[tensor]), model_name=embed,
                                    headers=headers)
        seen["embeddings"] = answer.outputs[0].as_numpy().tolist()
        labels = await client.infer(url, InferRequest(model_name=classify, infer_inputs=[tensor]),
                                    model_name=classify, headers=headers)
        seen["labels"] = labels.outputs[0].data
        try:
            await client.infer(url, InferRequest(model_name="no-such-model", infer_inputs=[tensor]),
                               model_name="no-such-model", headers=headers)
        except Exception as exc:  # httpx.HTTPStatusError: the status is what is checked
            seen["unknown_model_status"] = getattr(getattr(exc, "response", None), "status_code", None)
    finally:
        await client.close()
    return seen


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # kserve's imports warn about their own dependencies
    url, key, embed, classify, texts = sys.argv[1:6]
    print(json.dumps(asyncio.run(check(url, key, embed, classify, json.loads(texts)))))
