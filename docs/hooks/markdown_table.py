"""One Markdown table writer for the generated reference pages."""

from collections.abc import Iterable, Sequence


def cell(value: object) -> str:
    """A value as one table cell: pipes escaped, newlines folded (a cell is one line)."""
    return " ".join(str(value).split()).replace("|", "\\|")


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def code(value: object) -> str:
    """`value` as inline code, or an empty cell; backticks inside are doubled-fenced."""
    text = " ".join(str(value).split())
    if not text:
        return ""
    return f"`` {text} ``" if "`" in text else f"`{text}`"
