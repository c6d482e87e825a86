"""A package's public surface: the few names other packages (the `fleet` command line above all)
import from it, re-exported from the modules that define them and imported on first use.

A package's `__init__.py` names them in one dict, name -> "module" (or "module:attribute" where
the surface gives a name of its own), and hands it here:

    PUBLIC = {"ModelRegistry": "models.registry", ...}
    __all__ = sorted(PUBLIC)
    __getattr__, __dir__ = public_surface(__name__, PUBLIC)

Loading is lazy (PEP 562): importing one module of the package never loads the rest, so
`import workers.main` does not import what `fleet` needs and a surface name that needs ONNX
Runtime costs nothing until it is used. Moving a module means changing its string here;
tests/unit/test_layout.py imports every name of every surface, so a stale one fails there.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def public_surface(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's module-level `__getattr__` and `__dir__` for `names`."""

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = where.partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
