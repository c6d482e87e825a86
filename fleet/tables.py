"""Plain-text tables for the operator's terminal: one look for every `fleet` command and benchmark.

A table is its header line, a rule as long as that line, then one line per row. Each column is
as wide as its widest cell, columns are two spaces apart, trailing blanks are trimmed. Numbers
are right-aligned so their digits line up; text is left-aligned. Widths are what a terminal shows:
a Chinese character takes two columns.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Sequence

COLUMN_GAP = "  "
# A count, rate, share or duration as the commands print them: 12, -3, 1,024, 0.25, +1.5, 42%,
# 12ms, 4.2s, 1.8x, +inf; "-" and "" stand for a missing number and do not make a column text.
_NUMBER = re.compile(r"[+-]?(\d[\d,]*(\.\d*)?|\.\d+|inf)\s?(%|ms|s|x)?")
_MISSING = frozenset({"", "-"})


def display_width(text: str) -> int:
    """Terminal columns of `text`: wide and full-width characters (CJK) take two."""
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)


def _pad(cell: str, width: int, at_right: bool) -> str:
    blank = " " * (width - display_width(cell))
    return blank + cell if at_right else cell + blank


def is_number(cell: str) -> bool:
    return _NUMBER.fullmatch(cell) is not None


def numeric_columns(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[bool]:
    """Per column: True when it has a number and every other cell in it is a number or missing."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in headers]
    return [any(cell not in _MISSING for cell in column)
            and all(cell in _MISSING or is_number(cell) for cell in column) for column in columns]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[str] | None = None,
                 indent: str = "") -> str:
    """`rows` under `headers`. `right` names the right-aligned columns; without it, the columns
    that hold only numbers are (see `numeric_columns`)."""
    if any(len(row) != len(headers) for row in rows):
        raise ValueError(f"every row needs {len(headers)} cells, one per header: {list(headers)}")
    widths = [max([display_width(header), *(display_width(row[i]) for row in rows)]) for i, header in enumerate(headers)]
    aligned_right = numeric_columns(headers, rows) if right is None else [header in right for header in headers]

    def line(cells: Sequence[str]) -> str:
        padded = (_pad(cell, width, at_right) for cell, width, at_right in zip(cells, widths, aligned_right, strict=True))
        return (indent + COLUMN_GAP.join(padded)).rstrip()

    header = line(headers)
    return "\n".join([header, indent + "-" * (display_width(header) - len(indent)), *(line(row) for row in rows)])


def format_pairs(pairs: Sequence[tuple[str, str]], *, indent: str = "") -> str:
    """`key  value` lines with the values lined up: one record shown field by field."""
    width = max((display_width(key) for key, _ in pairs), default=0)
    return "\n".join(f"{indent}{_pad(key, width, False)}{COLUMN_GAP}{value}".rstrip() for key, value in pairs)
