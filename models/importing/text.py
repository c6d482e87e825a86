"""The tokenizer and maximum length of a text model, found beside its weights or graph (or where
`--tokenizer` says: a tokenizer.json file, or a folder holding the tokenizer).

A `tokenizer.json` is copied as it is, once it loads. A Hugging Face tokenizer folder without one (vocab.txt,
tokenizer_config.json, ...) is loaded with transformers' fast tokenizer, locally only, and its
backend saved as `tokenizer.json`: the one format the serving side reads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tokenizers import Tokenizer

from models.importing.errors import ImportRefused

TOKENIZER_FILE = "tokenizer.json"
# tokenizer_config.json says 1e30 when a tokenizer has no limit of its own.
_UNBOUNDED = 1_000_000
HF_TOKENIZER_FILES = ("tokenizer_config.json", "vocab.txt", "vocab.json")


def has_tokenizer(folder: Path) -> bool:
    """Whether `folder` holds a tokenizer: a tokenizer.json, or Hugging Face tokenizer files."""
    return any((folder / name).is_file() for name in (TOKENIZER_FILE, *HF_TOKENIZER_FILES))


def install_tokenizer(source: Path, into: Path) -> Path:
    """Write the tokenizer at `source` (a tokenizer.json, or a folder with the tokenizer) to
    `into/tokenizer.json`; refuse when there is none."""
    target = into / TOKENIZER_FILE
    if source.is_file():
        _check_loads(source)
        shutil.copyfile(source, target)
        return target
    if not source.is_dir():
        raise ImportRefused(f"tokenizer {source}: no such file or folder")
    folder = source
    if (folder / TOKENIZER_FILE).is_file():
        shutil.copyfile(folder / TOKENIZER_FILE, target)
        return target
    if not has_tokenizer(folder):
        raise ImportRefused(f"a text task needs a tokenizer: {folder} has no {TOKENIZER_FILE} and no Hugging Face "
                            "tokenizer files (tokenizer_config.json, vocab.txt)")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, use_fast=True)
    except (OSError, ValueError) as exc:
        raise ImportRefused(f"{folder}: its tokenizer files do not load as a fast tokenizer: {exc}") from exc
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ImportRefused(f"{folder}: the tokenizer has no fast (tokenizers) form to save as {TOKENIZER_FILE}")
    backend.save(str(target))
    return target


def _check_loads(path: Path) -> None:
    try:
        Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers library raises a bare Exception for a file it cannot read
        raise ImportRefused(f"{path} does not load as a tokenizer.json (tokenizers): {exc}") from exc


def _json(path: Path) -> dict[str, object]:
    if not path.is_file():
        return {}
    loaded = json.loads(path.read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, dict) else {}


def _positive_int(value: object) -> int | None:
    if isinstance(value, int | float) and 0 < value < _UNBOUNDED:
        return int(value)
    return None


def find_max_length(folder: Path, tokenizer_file: Path, override: int | None, *,
                    then: Path | None = None) -> int:
    """The longest token sequence the model takes: given, else the first the source states of
    sentence_bert_config max_seq_length, tokenizer_config model_max_length, the tokenizer's own
    truncation, config max_position_embeddings; in `folder`, then in `then` (the model's own
    folder, when the tokenizer came from another)."""
    if override is not None:
        if override <= 0:
            raise ImportRefused(f"--max-length must be positive, not {override}")
        return override
    truncation = _json(tokenizer_file).get("truncation")
    candidates = [
        _json(folder / "sentence_bert_config.json").get("max_seq_length"),
        _json(folder / "tokenizer_config.json").get("model_max_length"),
        truncation.get("max_length") if isinstance(truncation, dict) else None,
        _json(folder / "config.json").get("max_position_embeddings"),
    ]
    if then is not None:
        candidates += [_json(then / name).get(key) for name, key in (
            ("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length"),
            ("config.json", "max_position_embeddings"))]
    for candidate in candidates:
        found = _positive_int(candidate)
        if found is not None:
            return found
    searched = f"{folder}" + (f" or {then}" if then is not None else "")
    raise ImportRefused(f"{searched}: nothing states the model's maximum sequence length "
                        "(sentence_bert_config.json, tokenizer_config.json, config.json); pass --max-length")
