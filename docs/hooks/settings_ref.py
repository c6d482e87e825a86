"""The settings reference, read from the pydantic-settings classes: every `FleetSettings`
subclass in the project's packages, each with its own fields (env name, type, default,
description). A class added anywhere is found by its base, not by a list kept here."""

import importlib
import re
import typing
from pathlib import Path

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from markdown_table import code, table

PACKAGES = ("schemas", "common", "models", "versions", "workers", "gateway", "fleet")
SETTINGS_CLASS = re.compile(r"^class \w+\(.*Settings.*\):", re.MULTILINE)


def import_settings_modules(root: Path) -> None:
    """Import every module that defines a settings class, so `__subclasses__` sees them all."""
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if SETTINGS_CLASS.search(path.read_text(encoding="utf-8")):
                module = ".".join(path.relative_to(root).with_suffix("").parts)
                importlib.import_module(module)


def settings_classes(root: Path) -> list[type]:
    import_settings_modules(root)
    from common.settings import FleetSettings

    found: list[type] = []
    pending = [FleetSettings]
    while pending:
        cls = pending.pop(0)
        if cls not in found and not cls.__module__.startswith("tests"):
            found.append(cls)
            pending += sorted(cls.__subclasses__(), key=lambda c: (c.__module__, c.__name__))
    return found


def own_fields(cls: type) -> dict[str, FieldInfo]:
    """The fields a class declares itself (inherited ones are listed under their own class)."""
    declared = vars(cls).get("__annotations__", {})
    return {name: info for name, info in cls.model_fields.items() if name in declared}  # type: ignore[attr-defined]


def env_name(cls: type, name: str, info: FieldInfo) -> str:
    alias = info.validation_alias or info.alias
    if isinstance(alias, str):
        return alias.upper()
    return (cls.model_config.get("env_prefix", "") + name).upper()  # type: ignore[attr-defined]


def type_name(annotation: object) -> str:
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    text = re.sub(r"\b(typing|pathlib|pydantic\.types|collections\.abc)\.", "", text)
    return text.replace("NoneType", "None")


def default_of(info: FieldInfo) -> str:
    if info.default_factory is not None:
        try:
            return repr(info.default_factory())  # type: ignore[call-arg]
        except TypeError:
            return "(computed)"
    if info.default is PydanticUndefined:
        return "(required)"
    value = info.default
    return str(value) if isinstance(value, Path) else repr(value)


def anchored(env: str) -> str:
    """The variable's cell, with an anchor a page can link to: `settings.md#fleet_grpc_port`."""
    return f'<a id="{env.lower()}"></a>{code(env)}'


def class_section(cls: type) -> str:
    doc = (typing.cast(str, cls.__doc__ or "")).strip().split("\n\n")[0]
    bases = ", ".join(f"`{base.__name__}`" for base in cls.__bases__ if hasattr(base, "model_fields"))
    lines = [f"## {cls.__name__}", "", f"`{cls.__module__}.{cls.__name__}`" + (f", adds to {bases}" if bases else "")]
    if doc and not doc.startswith("Usage docs"):
        lines += ["", " ".join(doc.split())]
    rows = [(anchored(env_name(cls, name, info)), code(type_name(info.annotation)), code(default_of(info)),
             info.description or "") for name, info in own_fields(cls).items()]
    lines += ["", table(("variable", "type", "default", "description"), rows) if rows else "(no fields of its own)"]
    return "\n".join(lines)


def settings_page(root: Path) -> str:
    classes = settings_classes(root)
    intro = ("# Settings\n\nGenerated from the code at build time: every process reads one typed settings "
             "object (pydantic-settings) from `FLEET_*` environment variables. A class lists the fields it "
             "adds; a process also reads every field of the classes it builds on (`FleetSettings` is read by "
             "all of them). Values are parsed as pydantic does: lists and maps as JSON (`[8, 16]`, "
             "`{\"acme\": {\"rps\": 50}}`), booleans as `true`/`false`/`1`/`0`.\n\n")
    index = "Classes: " + ", ".join(f"[{cls.__name__}](#{cls.__name__.lower()})" for cls in classes) + "\n\n"
    return intro + index + "\n\n".join(class_section(cls) for cls in classes) + "\n"


def documented_names(root: Path) -> set[str]:
    """Every env name a settings class reads: what the settings page must show."""
    return {env_name(cls, name, info) for cls in settings_classes(root) for name, info in own_fields(cls).items()}
