"""What an import refuses, with a message naming what is wrong."""

from __future__ import annotations

from models.registry import RegistryError


class ImportRefused(RegistryError):
    """The source cannot become a served version as it is; nothing was registered."""
