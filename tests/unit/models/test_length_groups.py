import numpy as np

from models.backends.base import Encoded


def pad(rows):  # type: ignore[no-untyped-def]
    longest = max(len(r) for r in rows)
    return {"input_ids": np.asarray([list(r) + [0] * (longest - len(r)) for r in rows], dtype=np.int64)}


def lengths_of(encoded: Encoded) -> list[list[int]]:
    return [[int(x) for x in (chunk.feeds["input_ids"] != 0).sum(axis=1)] for chunk in encoded.chunks]


def test_rows_are_grouped_by_length_and_every_row_appears_once() -> None:
    rows = [[1] * n for n in (30, 4, 5, 29, 5, 31, 4)]
    encoded = Encoded.group(rows, bucket_size=16, pad=pad)
    covered = sorted(int(i) for chunk in encoded.chunks for i in chunk.rows)
    assert covered == list(range(len(rows)))
    assert lengths_of(encoded) == [[4, 4, 5, 5], [29, 30, 31]]
    assert encoded.padding_efficiency > 0.8


def test_unsorted_mode_keeps_one_padded_batch() -> None:
    rows = [[1] * n for n in (30, 4, 5)]
    encoded = Encoded.group(rows, bucket_size=0, pad=pad)
    assert len(encoded.chunks) == 1 and list(encoded.chunks[0].rows) == [0, 1, 2]
    assert encoded.padded_tokens == 90 and encoded.real_tokens == 39


def test_bucket_size_caps_rows_per_sub_batch() -> None:
    encoded = Encoded.group([[1] * 5] * 10, bucket_size=4, pad=pad)
    assert [len(c.rows) for c in encoded.chunks] == [4, 4, 2]
    assert encoded.padding_efficiency == 1.0


def test_empty_batch() -> None:
    assert Encoded.group([], bucket_size=16, pad=pad).count == 0


def test_a_row_that_would_waste_padding_starts_a_new_sub_batch() -> None:
    encoded = Encoded.group([[1] * n for n in (4, 4, 4, 12)], bucket_size=16, pad=pad, min_efficiency=0.8)
    assert lengths_of(encoded) == [[4, 4, 4], [12]]


def test_each_sub_batch_is_padded_as_if_on_its_own() -> None:
    rows = [[n] * n for n in (30, 4, 5, 29, 5, 31, 4)]
    encoded = Encoded.group(rows, bucket_size=16, pad=pad)
    for chunk in encoded.chunks:
        alone = pad([rows[i] for i in chunk.rows.tolist()])
        np.testing.assert_array_equal(chunk.feeds["input_ids"], alone["input_ids"])


def test_a_token_budget_bounds_each_sub_batch_and_a_longer_row_runs_alone() -> None:
    rows = [[1] * n for n in (10, 12, 9, 11, 40, 10, 12, 11)]
    encoded = Encoded.group(rows, bucket_size=16, pad=pad, min_efficiency=0.0, max_tokens=36)
    assert lengths_of(encoded) == [[9, 10, 10], [11, 11, 12], [12], [40]]  # 3 x 12 = 36 fits; 4 x 12 does not
    assert all(chunk.feeds["input_ids"].size <= 36 or len(chunk.rows) == 1 for chunk in encoded.chunks)
    assert sorted(int(i) for chunk in encoded.chunks for i in chunk.rows) == list(range(len(rows)))


def test_no_token_budget_keeps_the_row_bound_only() -> None:
    encoded = Encoded.group([[1] * 50] * 10, bucket_size=4, pad=pad, max_tokens=0)
    assert [len(c.rows) for c in encoded.chunks] == [4, 4, 2]
