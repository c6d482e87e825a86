"""An uploaded batch file is read line by line as it arrives, whatever its chunks, with bounds."""

from collections.abc import AsyncIterator

import pytest

from gateway.batch_jobs import BatchError
from gateway.batch_routes import lines_of


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def read(*parts: bytes, max_line: int = 10, max_bytes: int = 1000) -> list[bytes]:
    return [line async for line in lines_of(chunks(*parts), max_line, max_bytes)]


async def test_lines_are_whole_whatever_the_chunks() -> None:
    assert await read(b"ab", b"c\nde", b"f\n\ngh") == [b"abc", b"def", b"", b"gh"]


async def test_a_line_over_the_limit_is_cut_past_it_and_its_rest_dropped() -> None:
    lines = await read(b"short\n", b"x" * 8, b"y" * 8, b"z" * 8, b"\nafter\n")
    assert lines == [b"short", b"x" * 8 + b"yyy", b"after"]
    assert len(lines[1]) == 11, "one byte past the limit: the job refuses it by its length"


async def test_a_body_past_the_file_limit_stops_with_413() -> None:
    with pytest.raises(BatchError, match="over the limit of 12 bytes") as refused:
        await read(b"a\nb\n", b"c\nd\n", b"e\nf\n", b"g\n", max_bytes=12)
    assert refused.value.status == 413
