"""Embedding rows packed from numpy, and the `f32le` embedding encoding of the wire contract."""

import msgpack
import numpy as np
import pytest

from schemas.packing import f32le, float32_array, pack_outputs, pack_with_outputs, packb
from schemas.wire import Request, Result, Status, TraceRecord, WireError, new_request_id, now_ms


@pytest.mark.parametrize("width", [0, 1, 15, 16, 384, 65_536])
def test_a_row_packs_to_the_bytes_its_list_would(width: int) -> None:
    row = np.random.default_rng(width).standard_normal(width).astype(np.float32)
    assert float32_array(row) == packb(row.tolist())


def test_outputs_with_a_row_pack_as_outputs_with_its_list() -> None:
    row = np.linspace(-1, 1, 384, dtype=np.float32)
    assert pack_outputs({"embedding": row}) == packb({"embedding": row.tolist()})
    mixed = {"label": "refund", "embedding": row, "score": 0.5}
    assert msgpack.unpackb(pack_outputs(mixed)) == msgpack.unpackb(packb({**mixed, "embedding": row.tolist()}))


@pytest.mark.parametrize("fields", [0, 14, 15, 16, 40])
def test_outputs_are_spliced_after_any_number_of_fields(fields: int) -> None:
    """The map header counts the outputs too, across msgpack's fixmap/map16 boundary."""
    plain = {f"f{i}": i for i in range(fields)}
    row = np.arange(3, dtype=np.float32)
    decoded = msgpack.unpackb(pack_with_outputs(plain, {"embedding": row}))
    assert decoded == {**plain, "outputs": {"embedding": [0.0, 1.0, 2.0]}}


def embedding_result(row: np.ndarray) -> Result:
    return Result(id="a" * 32, model="m", version="m-1", status=Status.ok, outputs={"embedding": row},
                  device="sim", batch_size=3, timings={"queue_ms": 1.5}, worker="w", finished_ms=1_796_000_000_000)


def test_a_result_holding_a_row_decodes_as_one_holding_its_list() -> None:
    row = np.random.default_rng(1).standard_normal(384).astype(np.float32)
    as_list = embedding_result(row).model_copy(update={"outputs": {"embedding": row.tolist()}})
    assert Result.decode(embedding_result(row).encode()) == Result.decode(as_list.encode())


def test_f32le_carries_the_row_as_little_endian_bytes_and_says_so() -> None:
    row = np.random.default_rng(2).standard_normal(384).astype(np.float32)
    for result in (embedding_result(row), embedding_result(row).model_copy(update={"outputs": {"embedding": row.tolist()}})):
        raw = msgpack.unpackb(result.encode(embedding_encoding="f32le"))
        assert raw["embedding_encoding"] == "f32le"
        assert raw["outputs"]["embedding"] == row.astype("<f4").tobytes() == f32le(row)
        decoded = Result.decode(result.encode(embedding_encoding="f32le"))
        assert decoded.embedding() is not None and np.array_equal(decoded.embedding(), row)


def test_without_an_encoding_the_embedding_stays_a_float_array() -> None:
    row = np.arange(4, dtype=np.float32)
    raw = msgpack.unpackb(embedding_result(row).encode())
    assert "embedding_encoding" not in raw and raw["outputs"]["embedding"] == [0.0, 1.0, 2.0, 3.0]
    assert np.array_equal(Result.decode(embedding_result(row).encode()).embedding(), row)


def test_a_classifier_result_ignores_the_encoding() -> None:
    result = Result(id="b" * 32, model="m", status=Status.ok, outputs={"label": "refund", "score": 0.5})
    assert result.encode(embedding_encoding="f32le") == result.encode()
    assert Result.decode(result.encode()).embedding() is None


def test_f32le_bytes_of_a_wrong_length_are_refused() -> None:
    bad = Result(id="c" * 32, model="m", status=Status.ok, outputs={"embedding": b"\x00" * 5},
                 embedding_encoding="f32le")
    with pytest.raises(WireError, match="multiple of 4"):
        Result.decode(bad.encode()).embedding()


def test_the_tenant_stamp_overrides_the_results_own() -> None:
    result = embedding_result(np.zeros(2, dtype=np.float32)).model_copy(update={"tenant": "old"})
    assert Result.decode(result.encode(tenant="acme")).tenant == "acme"
    assert Result.decode(result.encode()).tenant == "old"


def request_map(**fields: object) -> dict[str, object]:
    return {"v": 1, "id": new_request_id(), "model": "m", "inputs": {"text": "hi"}, "deadline_ms": now_ms() + 1000,
            "submitted_ms": now_ms(), **fields}


def test_a_request_may_ask_for_f32le_and_nothing_else() -> None:
    assert Request.decode(msgpack.packb(request_map(embedding_encoding="f32le"))).embedding_encoding == "f32le"
    assert Request.decode(msgpack.packb(request_map())).embedding_encoding is None
    with pytest.raises(WireError, match="embedding_encoding"):
        Request.decode(msgpack.packb(request_map(embedding_encoding="f16")))


def test_a_trace_packs_a_row_as_floats() -> None:
    trace = TraceRecord(id="x", model="m", input="t", status=Status.ok, outputs={"embedding": np.ones(2, np.float32)},
                        reason="request flag")
    assert msgpack.unpackb(trace.encode())["outputs"] == {"embedding": [1.0, 1.0]}


@pytest.mark.parametrize("inputs", [{"text": "ok", "n": float("nan")}, {"text": "ok", "deep": [[[[[[[[[[1]]]]]]]]]]}])
def test_inputs_beyond_plain_strings_are_still_walked_for_bounds(inputs: dict[str, object]) -> None:
    with pytest.raises(WireError, match="inputs"):
        Request.decode(msgpack.packb(request_map(inputs=inputs)))


def test_as_floats_turns_f32le_back_into_the_float_list() -> None:
    row = np.linspace(0, 1, 5, dtype=np.float32)
    carried = Result.decode(embedding_result(row).encode(embedding_encoding="f32le"))
    plain = carried.as_floats()
    assert plain.embedding_encoding is None and plain.outputs == {"embedding": row.tolist()}
    assert embedding_result(row).as_floats() is not None
