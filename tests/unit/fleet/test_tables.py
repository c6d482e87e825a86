"""The one table printer of the `fleet` commands and benchmarks, and their exit statuses."""

import pytest

from fleet.exits import Exit
from fleet.tables import format_pairs, format_table, is_number


def test_numbers_are_right_aligned_text_left() -> None:
    text = format_table(["name", "n"], [["a", "1"], ["bbb", "100"]])
    assert text.splitlines() == ["name    n", "---------", "a       1", "bbb   100"]


@pytest.mark.parametrize("cell", ["0", "-3", "1,024", "0.25", "+1.50", "42%", "12ms", "4.2s", "1.8x", "+inf"])
def test_numbers_as_the_commands_print_them(cell: str) -> None:
    assert is_number(cell)


@pytest.mark.parametrize("cell", ["fp32", "3m05s", "∞ stalled", "2026-12-01", "1.2.3", "v1", "-", ""])
def test_text_and_missing_cells_are_not_numbers(cell: str) -> None:
    assert not is_number(cell)


def test_a_missing_number_keeps_its_column_numeric_but_text_does_not() -> None:
    text = format_table(["k", "figure", "mixed"], [["a", "-", "12"], ["b", "1234", "n/a"]])
    header, rule, first, second = text.splitlines()
    assert first.index("-") == second.index("1234") + 3, "missing aligned with the numbers' last digit"
    assert first.endswith("12") and second.endswith("n/a") and first.index("12") == second.index("n/a")
    assert len(rule) == len(header)


def test_named_columns_are_right_aligned_whatever_they_hold() -> None:
    text = format_table(["worker", "drain"], [["w1", "∞ stalled"], ["w22", "5.2s"]], right=["drain"])
    lines = text.splitlines()
    assert lines[0] == "worker      drain"
    assert lines[2:] == ["w1      ∞ stalled", "w22          5.2s"]


def test_indent_trailing_blanks_and_an_empty_table() -> None:
    text = format_table(["version", "note"], [["v1", ""]], indent="  ")
    assert text.splitlines() == ["  version  note", "  -------------", "  v1"]
    assert format_table(["a", "b"], []).splitlines() == ["a  b", "----"]


def test_a_row_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ValueError, match="2 cells"):
        format_table(["a", "b"], [["only one"]])


def test_pairs_line_up_their_values() -> None:
    assert format_pairs([("id", "x-1"), ("precision", "int8")]).splitlines() == ["id         x-1", "precision  int8"]


def test_exit_statuses_keep_the_numbers_scripts_rely_on() -> None:
    assert (Exit.OK, Exit.FAILED, Exit.UNAVAILABLE, Exit.ROLLED_BACK, Exit.INTERRUPTED) == (0, 1, 2, 3, 130)


def test_chinese_text_lines_up_as_a_terminal_shows_it() -> None:
    text = format_table(["asked", "n"], [["今天天气怎么样", "1"], ["weather?", "12"]])
    assert text.splitlines() == ["asked            n", "------------------", "今天天气怎么样   1", "weather?        12"]
    assert format_pairs([("问题", "a"), ("id", "b")]).splitlines() == ["问题  a", "id    b"]
