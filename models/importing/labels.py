"""Labels of a classifier: given on the command line, or read from a transformers config's id2label."""

from __future__ import annotations

import json
from pathlib import Path

from models.importing.errors import ImportRefused


def labels_from_config(config_file: Path) -> tuple[str, ...]:
    """`id2label` in id order; () when the file or the field is absent."""
    if not config_file.is_file():
        return ()
    config = json.loads(config_file.read_text(encoding="utf-8"))
    id2label = config.get("id2label") if isinstance(config, dict) else None
    if not isinstance(id2label, dict) or not id2label:
        return ()
    try:
        ordered = sorted((int(key), str(value)) for key, value in id2label.items())
    except ValueError as exc:
        raise ImportRefused(f"{config_file}: id2label keys must be integers: {exc}") from exc
    if [index for index, _ in ordered] != list(range(len(ordered))):
        raise ImportRefused(f"{config_file}: id2label ids are not 0..{len(ordered) - 1}")
    return tuple(label for _, label in ordered)


def parse_labels(text: str) -> tuple[str, ...]:
    """`--labels a,b,c` (or a file with one label a line, given as @path)."""
    if text.startswith("@"):
        lines = Path(text[1:]).read_text(encoding="utf-8").splitlines()
        return tuple(line.strip() for line in lines if line.strip())
    return tuple(part.strip() for part in text.split(",") if part.strip())
