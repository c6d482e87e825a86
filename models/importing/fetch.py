"""The source of an import as a local path: a path as given, or a copy of an fsspec URL.

The same URLs `fleet models register` accepts (file://, s3://, gs://, ... with fsspec and its
filesystem packages installed). A URL's copy lives in a temporary folder for the import only.
Never a model hub: nothing here resolves model names, only paths and URLs.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from models.importing.errors import ImportRefused
from models.registry import sha256_of
from models.remote_files import local_path_of, url_filesystem

# A source is a model, not a data lake: bound what an import hashes and copies.
MAX_SOURCE_FILES = 10_000


@contextmanager
def local_source(source: str) -> Iterator[Path]:
    """The source as a local file or folder for the duration of the import."""
    path = local_path_of(source)
    if path is not None:
        if not path.exists():
            raise ImportRefused(f"{path} does not exist")
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="fleet-import-") as scratch:
        yield _download(source, Path(scratch))


def _download(url: str, into: Path) -> Path:
    fs, root = url_filesystem(url, "importing from it", ImportRefused)
    if not fs.exists(root):
        raise ImportRefused(f"{url} does not exist")
    name = PurePosixPath(root).name or "source"
    target = into / name
    if fs.isdir(root):
        files = [path for path in fs.find(root) if not fs.isdir(path)]
        if len(files) > MAX_SOURCE_FILES:
            raise ImportRefused(f"{url} holds {len(files)} files, more than {MAX_SOURCE_FILES}: not a model folder")
        for path in files:
            relative = PurePosixPath(path).relative_to(PurePosixPath(root))
            local = target / relative
            local.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(path, str(local))
    else:
        fs.get_file(root, str(target))
    return target


def source_hashes(path: Path) -> dict[str, str]:
    """sha256 of every file of the source (relative names; a single file by its own name)."""
    if path.is_file():
        return {path.name: sha256_of(path)}
    files = sorted(p for p in path.rglob("*") if p.is_file())
    if len(files) > MAX_SOURCE_FILES:
        raise ImportRefused(f"{path} holds {len(files)} files, more than {MAX_SOURCE_FILES}: not a model folder")
    return {p.relative_to(path).as_posix(): sha256_of(p) for p in files}


def short_digest(hashes: dict[str, str]) -> str:
    """One digest of a whole source, for recipe lines and logs."""
    joined = "\n".join(f"{name} {digest}" for name, digest in sorted(hashes.items()))
    return hashlib.sha256(joined.encode()).hexdigest()[:12]
