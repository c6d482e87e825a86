"""Model files behind fsspec URLs (file://, s3://, gs://, ...): what `fleet models register` and
`fleet models import` read. fsspec is optional; only URL sources need it, and a file:// URL is
read as a plain path when it is not installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from models.registry import RegistryError


def is_url(source: str) -> bool:
    return "://" in source


def local_path_of(source: str) -> Path | None:
    """The source as a local path (a path, or a file:// URL while fsspec is absent); None: fsspec must fetch it."""
    if not is_url(source):
        return Path(source).expanduser()
    if source.startswith("file://") and importlib.util.find_spec("fsspec") is None:
        return Path(source.removeprefix("file://"))
    return None


def url_filesystem(url: str, purpose: str, refusal: type[RegistryError] = RegistryError) -> tuple[Any, str]:
    """(fsspec filesystem, root path without a trailing slash) of a URL; `refusal` names a missing fsspec.

    `purpose` says what needs it ("importing from it", "registering from it").
    """
    try:
        import fsspec  # type: ignore[import-untyped]  # optional: only URL sources need it
    except ImportError as exc:
        raise refusal(f"{url} is a URL: {purpose} needs fsspec (pip install fsspec, plus s3fs/gcsfs for s3:// "
                      "or gs://), which is not installed") from exc
    fs, root = fsspec.core.url_to_fs(url)
    return fs, str(root).rstrip("/")
