"""`fleet consistency` samples the newest requests and counts only the garbage inside that window."""

from fleet.commands.consistency import newest_decodable
from schemas.wire import Request, new_request_id, now_ms


def request(text: str) -> Request:
    return Request(id=new_request_id(), model="m", inputs={"text": text}, deadline_ms=now_ms() + 1000,
                   submitted_ms=now_ms())


def test_old_garbage_outside_the_sample_is_not_counted() -> None:
    probes = [request(f"probe {i}") for i in range(3)]
    timeline = [(1, 0, None), (2, 1, None), (3, 2, request("old"))] + [(10 + i, 5 + i, p) for i, p in enumerate(probes)]
    sample, skipped = newest_decodable(timeline, 3)
    assert [r.inputs["text"] for r in sample] == ["probe 0", "probe 1", "probe 2"] and skipped == 0


def test_garbage_among_the_newest_is_counted_and_the_sample_still_filled() -> None:
    timeline = [(1, 0, request("a")), (2, 1, request("b")), (3, 2, None), (4, 3, request("c")), (5, 4, None)]
    sample, skipped = newest_decodable(timeline, 2)
    assert [r.inputs["text"] for r in sample] == ["b", "c"] and skipped == 2
