"""Which language a pair of texts is in, as the verifiers are calibrated and served: "zh" when
either text holds a Han character, else "en". Shared by the build and the worker. No torch here."""

from __future__ import annotations

import re

LANGUAGES = ("en", "zh")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def pair_language(a: str, b: str) -> str:
    return "zh" if _HAN.search(a) or _HAN.search(b) else "en"
