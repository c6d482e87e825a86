"""Dead letters leave the worker with their texts masked and, unless allowed, without raw bytes."""

import msgpack

from schemas.wire import DeadLetter
from workers.delivery.dead_letters import CUT, MAX_ENTRIES, MAX_TEXT_CHARS, MAX_VIEW_BYTES, DeadLetterPolicy


def _letter(original: bytes, reason: str = "invalid fields: deadline_ms: Field required") -> DeadLetter:
    return DeadLetter(reason=reason, topic="fleet.requests.m", partition=0, offset=3, original=original,
                      original_size=len(original))


def test_default_policy_drops_the_original_and_masks_every_text() -> None:
    record = {"v": 1, "id": "r1", "tenant": "acme", "inputs": {"text": "call +44 20 7946 0958 or bob@example.org"},
              "params": {"notes": ["card 4111 1111 1111 1111"], "blob": b"\x00" * 9}}
    out = DeadLetterPolicy().outgoing(_letter(msgpack.packb(record)))
    assert out.original is None and out.original_size is not None
    assert out.masked == {"v": 1, "id": "r1", "tenant": "acme", "inputs": {"text": "call <phone> or <email>"},
                          "params": {"notes": ["card <card>"], "blob": "<9 bytes>"}}
    assert b"bob@example.org" not in out.encode() and b"4111" not in out.encode()


def test_allowed_original_travels_untouched_beside_the_masked_view() -> None:
    raw = msgpack.packb({"v": 1, "inputs": {"text": "ann@example.com"}})
    out = DeadLetterPolicy(keep_original=True).outgoing(_letter(raw))
    assert out.original == raw and out.masked == {"v": 1, "inputs": {"text": "<email>"}}


def test_the_reason_is_masked_too() -> None:
    out = DeadLetterPolicy().outgoing(_letter(b"\xc1", reason="bad value 'eve@example.net'"))
    assert out.reason == "bad value '<email>'" and out.masked is None


def test_garbage_and_non_maps_have_no_view() -> None:
    policy = DeadLetterPolicy()
    assert policy.masked_view(b"\xc1\xc1") is None
    assert policy.masked_view(msgpack.packb(["a", "list"])) is None
    assert policy.masked_view(b"") is None and policy.masked_view(None) is None


def test_a_hostile_record_gives_a_bounded_view() -> None:
    nested: object = "deep"
    for _ in range(50):
        nested = {"k": nested}
    record = {"wide": list(range(10_000)), "long": "x" * 1_000_000, "deep": nested,
              **{f"key{i}": i for i in range(1_000)}}
    view = DeadLetterPolicy().masked_view(msgpack.packb(record))
    assert view is not None
    assert len(view) == MAX_ENTRIES + 1 and "<more>" in view
    assert len(view["wide"]) == MAX_ENTRIES + 1 and view["wide"][-1] == f"<{10_000 - MAX_ENTRIES} more items>"
    assert len(view["long"]) < MAX_TEXT_CHARS + 64
    assert "nested too deep" in str(view["deep"])
    assert len(msgpack.packb(view)) < 64 * 1024


def test_a_request_id_stays_readable_even_where_its_digits_look_like_a_phone_number() -> None:
    request_id = "8519225221436927408726929ed04f1b"  # its digit run matched the phone pattern
    view = DeadLetterPolicy().masked_view(msgpack.packb({"v": 1, "id": request_id, "inputs": {"text": "+1 415 555 0100"}}))
    assert view is not None and view["id"] == request_id
    assert "555" not in str(view["inputs"])
    not_an_id = DeadLetterPolicy().masked_view(msgpack.packb({"id": "call me at +1 415 555 0100"}))
    assert not_an_id is not None and "555" not in not_an_id["id"]


def amplifying_record() -> bytes:
    """52 KB of empty lists nested past the view's depth: each 1-byte list would become a 23-character
    marker, a 1.2 MB view, over the producer's 1 MiB request."""
    lists = [[[[[[] for _ in range(256)] for _ in range(200)]]]]
    return msgpack.packb({"v": 2, "id": "0" * 32, "model": "m", "a": lists})


def test_a_view_stays_within_its_byte_budget_however_it_amplifies() -> None:
    raw = amplifying_record()
    assert len(raw) < 60_000
    out = DeadLetterPolicy(keep_original=True).outgoing(_letter(raw))
    assert len(msgpack.packb(out.masked)) < MAX_VIEW_BYTES + 4096
    assert CUT in str(out.masked) and out.masked is not None and out.masked["model"] == "m"
    assert len(out.encode()) < 1024 * 1024 - 4096  # the producer's max request, with room for the record batch


def test_a_view_under_the_budget_is_whole() -> None:
    record = {"v": 1, "params": {"rows": [[i, str(i)] for i in range(200)]}}
    view = DeadLetterPolicy().masked_view(msgpack.packb(record))
    assert view == {"v": 1, "params": {"rows": [[i, str(i)] for i in range(200)]}}
