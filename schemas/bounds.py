"""Bounds a parsed document (JSON at the gateway, msgpack at the worker) must keep before anyone uses it.

Python's json module accepts NaN, Infinity, numbers that overflow to infinity, integers of any
size and lone UTF-16 surrogates ("\\ud800"); msgpack cannot pack the last two and the workers
must not see the others. The walk is iterative, so depth costs no recursion.
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class JsonBounds:
    max_depth: int  # containers nested inside the document; the document itself does not count


def dotted(path: Path) -> str:
    return ".".join(str(part) for part in path) or "body"


def _string_problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"lone surrogate at character {exc.start}; strings must be valid Unicode"
    return None


def _scalar_problem(value: Any, allow_bytes: bool = False) -> str | None:
    if allow_bytes and isinstance(value, bytes):
        return None  # a tensor's data (schemas/tensors.py checks it against its dtype and shape)
    if isinstance(value, str):
        return _string_problem(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return None if INT64_MIN <= value <= INT64_MAX else "integer outside the int64 range"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value} is not a finite number"
    return f"unsupported value of type {type(value).__name__}; plain data only (str, int, float, bool, nil, list, map)"


def _children(value: dict[str, Any] | list[Any], path: Path) -> Iterator[tuple[Path, Any]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*path, key), key  # keys are strings to check too
            yield (*path, key), child
    else:
        for index, child in enumerate(value):
            yield (*path, index), child


def bound_problems(document: Any, bounds: JsonBounds, limit: int = 5, *,
                   allow_bytes: bool = False) -> list[tuple[Path, str]]:
    """Up to `limit` (path, problem) pairs; empty when the document keeps the bounds. `allow_bytes`:
    binary strings are plain data too (a request's inputs, where tensors travel as bytes)."""
    problems: list[tuple[Path, str]] = []
    stack: list[tuple[Path, Any, int]] = [((), document, 0)]
    while stack and len(problems) < limit:
        path, value, depth = stack.pop()
        if not isinstance(value, (dict, list)):
            if (problem := _scalar_problem(value, allow_bytes)) is not None:
                problems.append((path, problem))
            continue
        if depth > bounds.max_depth:
            problems.append((path, f"nested deeper than {bounds.max_depth} levels"))
            continue
        stack.extend((child_path, child, depth + 1) for child_path, child in _children(value, path))
    return problems


def plain_strings(document: Any) -> bool:
    """A map whose values are all strings: in bounds at once for msgpack input, whose strings are valid UTF-8."""
    if not isinstance(document, dict):
        return False
    for value in document.values():  # a loop, not all() over a generator: this runs twice a request
        if type(value) is not str:
            return False
    return True
