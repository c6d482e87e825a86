"""An outcome's payload: packed once, in the encoding its request asked for, and ready before delivery
when a stage thread packed it (workers/compute/compute.py)."""

import numpy as np

from schemas.packing import F32LE
from schemas.wire import ReplyTo, Request, Result, Status, new_request_id, now_ms
from workers.delivery.sink import Outcome, pack_payloads


def outcome(encoding: str | None) -> Outcome:
    request = Request(id=new_request_id(), model="m", inputs={"text": "hi"}, reply=ReplyTo(redis="w1"),
                      deadline_ms=now_ms() + 1000, submitted_ms=now_ms(), tenant="t", embedding_encoding=encoding)
    row = np.arange(4, dtype=np.float32)
    return Outcome(request, Result(id=request.id, model="m", status=Status.ok, outputs={"embedding": row}))


def test_packed_payloads_are_ready_and_match_what_delivery_would_pack() -> None:
    outcomes = [outcome(F32LE), outcome(None)]
    pack_payloads(outcomes)
    for item in outcomes:
        assert item._payload is not None, "packed before delivery asks for it"
        assert item.request is not None
        assert item.payload == item.result.encode(tenant="t", embedding_encoding=item.request.embedding_encoding)
    raw, floats = (Result.decode(item.payload) for item in outcomes)
    assert raw.embedding_encoding == F32LE and raw.tenant == "t"
    assert np.array_equal(raw.embedding(), floats.embedding())
