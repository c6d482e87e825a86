"""schemas/README.md, the schema classes and the workers' code say the same thing: every field of
the request, result and dead-letter tables is a field of its class and back, and every timing,
error code and dead-letter code the README lists is in schemas/codes.py, which holds exactly the
ones the workers write (read from their source with ast). A change on one side alone fails here."""

import ast
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from schemas.codes import DeadLetterCode, ErrorCode, Timing
from schemas.wire import DeadLetter, Request, Result
from tests.paths import REPO_ROOT

README = (REPO_ROOT / "schemas" / "README.md").read_text()
WRITERS = ("schemas", "workers")  # the packages that write results and dead letters


def section(title: str) -> str:
    """The text under `## title` (or ###), up to the next heading of any level."""
    match = re.search(rf"^#+ {re.escape(title)}[^\n]*\n(.*?)(?=^#)", README + "\n#", re.S | re.M)
    assert match, f"no section {title!r} in schemas/README.md"
    return match.group(1)


def table_rows(title: str) -> dict[str, str]:
    """The first table of a section: each name in the first column (`a`, `b` share a row) -> its row."""
    rows = {}
    for line in section(title).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or set(cells[0]) <= {"-", " "} or cells[0] == "field":
            continue
        for name in re.findall(r"`([^`]+)`", cells[0]):
            rows[name] = line
    return rows


def backticked(text: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)`", text))


def documented_fields(title: str) -> set[str]:
    return set(table_rows(title))


def readme_dead_letter_codes() -> set[str]:
    return backticked(table_rows("Dead letter (on `fleet.dlq`)")["code"]) - set(DeadLetter.model_fields)


def readme_error_codes() -> set[str]:
    paragraph = re.search(r"^Error codes: (.*?)\n\n", README, re.S | re.M)
    assert paragraph, "no 'Error codes:' paragraph in schemas/README.md"
    return backticked(paragraph.group(1)) - {"reply", "topic", "max_input_tokens", "FLEET_OVERLONG_INPUTS"}


def readme_timings() -> set[str]:
    on_the_wire = table_rows("Result")["timings"].split("Not on the wire")[0]
    return {name for name in backticked(on_the_wire) if name.endswith("_ms") and name != "submitted_ms"}


@pytest.mark.parametrize(("title", "schema"), [("Request", Request), ("Result", Result),
                                               ("Dead letter (on `fleet.dlq`)", DeadLetter)])
def test_every_documented_field_is_a_field_and_back(title: str, schema: type[BaseModel]) -> None:
    documented, fields = documented_fields(title), set(schema.model_fields)
    assert documented - fields == set(), f"in the README's {title} table, not in {schema.__name__}"
    assert fields - documented == set(), f"in {schema.__name__}, not in the README's {title} table"


def test_the_documented_codes_and_timings_are_the_schemas_lists() -> None:
    assert readme_dead_letter_codes() == {code.value for code in DeadLetterCode}
    assert readme_error_codes() == {code.value for code in ErrorCode}
    assert readme_timings() == {timing.value for timing in Timing}


# --- what the workers write, read from their source ----------------------------------------------

def _name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _trees() -> list[ast.Module]:
    return [ast.parse(Path(path).read_text(), filename=str(path))
            for package in WRITERS for path in sorted((REPO_ROOT / package).rglob("*.py"))]


def written_codes(trees: list[ast.Module]) -> tuple[set[str], set[str]]:
    """(dead-letter codes, error codes) passed as literals where the workers make them."""
    dead, errors = set(), set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == "DeadLetter":
                dead |= {text for item in node.body if isinstance(item, ast.AnnAssign)
                         and getattr(item.target, "id", "") == "code" and (text := _text(item.value))}
            if not isinstance(node, ast.Call):
                continue
            name, args = _name(node), node.args
            keyword = next((_text(k.value) for k in node.keywords if k.arg == "code"), None)
            if name == "dead_letter" and len(args) > 2:
                dead.add(_text(args[2]) or "")
            elif name == "WireError":
                dead.add((_text(args[1]) if len(args) > 1 else keyword) or "")
            elif name == "DeadLetter" and keyword:
                dead.add(keyword)
            elif name == "ErrorInfo" and keyword:
                errors.add(keyword)
            elif name == "error" and len(args) > 1 and _text(args[0]) is None and _text(args[1]):
                errors.add(_text(args[1]) or "")  # Provenance.error(request_id, code, message), not log.error
    return dead - {""}, errors - {""}


def written_timings(trees: list[ast.Module]) -> set[str]:
    """Stages named where a result's timings are made: timings_of's keywords and keys."""
    found = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _name(node) == "timings_of":
                found |= {k.arg for k in node.keywords if k.arg}
            elif isinstance(node, ast.FunctionDef) and node.name in ("timings_of", "_early_timings"):
                found |= {text for inner in ast.walk(node) if isinstance(inner, ast.Dict)
                          for key in inner.keys if (text := _text(key))}
                found |= {text for inner in ast.walk(node) if isinstance(inner, ast.Subscript)
                          and isinstance(inner.ctx, ast.Store) and (text := _text(inner.slice))}
    return found


def test_the_codes_and_timings_the_workers_write_are_the_schemas_lists() -> None:
    trees = _trees()
    dead, errors = written_codes(trees)
    assert dead == {code.value for code in DeadLetterCode}, "dead-letter codes written vs DeadLetterCode"
    assert errors == {code.value for code in ErrorCode}, "error codes written vs ErrorCode"
    assert written_timings(trees) == {timing.value for timing in Timing}, "timings written vs Timing"


def test_the_readers_notice_a_change() -> None:
    """The readers above find what a new code or stage would add, and skip log calls."""
    assert "reply" in documented_fields("Request") and "masked" in documented_fields("Dead letter (on `fleet.dlq`)")
    tree = ast.parse('dead_letter(r, "why", "new_code", w)\nwho.error(rid, "new_error", "m")\n'
                     'log.error("fmt %s", "not a code")\nraise WireError("m", "new_wire")\n'
                     'ErrorInfo(code="new_info", message="m")\ntimings_of(p, i, f, new_ms=1.0)\n')
    assert written_codes([tree]) == ({"new_code", "new_wire"}, {"new_error", "new_info"})
    assert written_timings([tree]) == {"new_ms"}
