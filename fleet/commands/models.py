"""`fleet models`: the registered model versions and which of them serves.

    fleet models list [MODEL]                  versions with precision, task, parent, check; pointer markers
    fleet models show VERSION_OR_MODEL         one manifest in full (a model: its stable version) + pointers
    fleet models register PATH_OR_URL         copy a version folder (manifest.json + artifacts) into the
                                               registry and register it; URLs (s3://, file://, ...) need fsspec
    fleet models import PATH_OR_URL --name NAME [--task T] [--int8]
                                               derive, check and register a version from your own model
                                               (ONNX, transformers, sentence-transformers, scikit-learn, ...)
    fleet models set-stable MODEL VERSION      point stable at VERSION (audited); the model is served by
                                               every gateway within seconds (a retired model comes back)
    fleet models retire MODEL [VERSION]        take a model, or one version, out of service: gateways
                                               refuse it, the console stops listing it (audited)
    fleet models gateways                      what each running gateway serves
    fleet models history MODEL                 who changed the pointers, when, and why

Pointers and the catalogue of served models (common/catalog.py) live in Redis; the registry folder
is FLEET_MODEL_DIR (default <FLEET_HOME>/models) and keeps every version, retired or not.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from common.catalog import CatalogEntry, CatalogError, list_gateways, read_entry, retire
from common.heartbeats import list_workers
from common.redis_cluster import AnyRedis
from common.clients import redis_client
from common.settings import FleetSettings
from fleet.arguments import command_parser, default_actor
from fleet.commands.model_import import add_import_parser, cmd_import, source_cell
from fleet.commands.redis_access import with_redis
from fleet.exits import Exit
from fleet.tables import format_pairs, format_table
from models import (MANIFEST_FILE, ModelManifest, ModelRegistry, RegistryError, local_path_of, parse_version_id,
                    url_filesystem)
from versions import AuditEntry, PointerError, PointerState, VersionPointers

SHORT_SHA = 12


def format_ms(time_ms: int) -> str:
    return datetime.fromtimestamp(time_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if time_ms else "-"


def model_of(version_or_model: str) -> str:
    """The model name of a version id `<name>-YYYYMMDD-NNN`, or the argument itself when it is a name."""
    parts = version_or_model.rsplit("-", 2)
    if len(parts) == 3 and parse_version_id(parts[0], version_or_model) is not None:
        return parts[0]
    return version_or_model


async def read_pointers(settings: FleetSettings, model: str) -> tuple[PointerState, CatalogEntry | None] | None:
    """The pointers and the model's catalogue entry, or None (with a note) when Redis does not answer:
    listing works without it."""
    redis = redis_client(settings, socket_connect_timeout=1, socket_timeout=2)
    try:
        return await VersionPointers(redis, model).get(), await read_entry(redis, model)
    except (RedisError, OSError) as exc:
        print(f"(pointers unknown: Redis at {settings.redis_url_redacted} does not answer: {exc})", file=sys.stderr)
        return None
    finally:
        await redis.aclose()


def markers(manifest: ModelManifest, pointers: PointerState | None, entry: CatalogEntry | None = None) -> str:
    if pointers is None:
        return "?"
    marks = [name for name, version in (("stable", pointers.stable), ("candidate", pointers.candidate),
                                        ("previous", pointers.previous)) if version == manifest.id]
    if pointers.candidate == manifest.id:
        marks[marks.index("candidate")] = f"candidate {pointers.percent:g}% ({pointers.state})"
    if entry is not None and manifest.id in entry.retired_versions:
        marks.append("retired")
    return ", ".join(marks)


def check_cell(manifest: ModelManifest) -> str:
    check = manifest.check
    return f"{check.name}: {check.metric} {check.value:.4g} {check.comparison} {check.threshold:g}"


def list_rows(manifests: Sequence[ModelManifest], pointers: PointerState | None,
              entry: CatalogEntry | None = None) -> list[tuple[str, ...]]:
    return [(m.id, m.precision, str(getattr(m, "task", "embedding")), m.created.strftime("%Y-%m-%d %H:%M"),
             m.parent or "-", source_cell(m, short=True), check_cell(m), markers(m, pointers, entry))
            for m in manifests]


def listing_word(entry: CatalogEntry | None) -> str:
    """How the catalogue lists a model: served, retired, or not served (never made stable)."""
    if entry is None:
        return "not served: no stable version set"
    return "retired" if entry.retired else "served"


def registered_models(registry: ModelRegistry) -> list[str]:
    """The model names with a folder in the registry (`fleet models list` and the console list these)."""
    if not registry.root.is_dir():
        return []
    return sorted(p.name for p in registry.root.iterdir() if p.is_dir() and not p.name.startswith("."))


def cmd_list(settings: FleetSettings, registry: ModelRegistry, model: str | None) -> int:
    names = [model] if model else registered_models(registry)
    if not names:
        print(f"no models registered in {registry.root} (run scripts/build-models)")
        return Exit.OK
    for name in names:
        manifests = registry.versions(name)
        if not manifests:
            print(f"{name}: no registered versions in {registry.root}")
            continue
        read = asyncio.run(read_pointers(settings, name))
        pointers, entry = read if read is not None else (None, None)
        print(f"{name}" + (f"  ({listing_word(entry)})" if read is not None else ""))
        print(format_table(("version", "precision", "task", "created", "parent", "source", "check", "pointers"),
                           list_rows(manifests, pointers, entry)))
        print()
    return Exit.OK


def describe(manifest: ModelManifest) -> list[tuple[str, str]]:
    hyper = getattr(manifest, "hyperparameters", {}) or {}
    labels = getattr(manifest, "labels", ()) or ()
    lines = [
        ("id", manifest.id), ("name", manifest.name), ("created", manifest.created.isoformat()),
        ("precision", manifest.precision), ("task", str(getattr(manifest, "task", "embedding"))),
        ("parent", manifest.parent or "-"),
        ("source", source_cell(manifest)),
        ("training data", getattr(manifest, "training_data", None) or "-"),
        ("code commit", getattr(manifest, "code_commit", None) or "-"),
        ("hyperparameters", ", ".join(f"{k}={v}" for k, v in sorted(hyper.items())) or "-"),
        ("labels", ", ".join(labels) or "-"),
        ("inputs", ", ".join(f"{t.name} {t.dtype}{list(t.shape)}" for t in manifest.inputs)),
        ("outputs", ", ".join(f"{t.name} {t.dtype}{list(t.shape)}" for t in manifest.outputs)),
        ("max length", str(manifest.max_length) if manifest.max_length is not None else "-"),
        ("check", check_cell(manifest) + (" passed" if manifest.check.passed else " FAILED")),
    ]
    lines += [("recipe " + key, value) for key, value in sorted(manifest.recipe.items())]
    lines += [("file " + name, digest[:SHORT_SHA]) for name, digest in sorted(manifest.files.items())]
    return lines


def describe_pointers(pointers: PointerState) -> list[tuple[str, str]]:
    if pointers.stable is None and pointers.state == "idle":
        return [("pointers", "none set (fleet models set-stable)")]
    return [("stable", pointers.stable or "-"), ("candidate", pointers.candidate or "-"),
            ("rollout", f"{pointers.state}, stage {pointers.stage}, {pointers.percent:g}% to candidate"),
            ("previous", pointers.previous or "-"),
            ("last change", f"{format_ms(pointers.updated_ms)} by {pointers.actor}: {pointers.reason}")]


def cmd_show(settings: FleetSettings, registry: ModelRegistry, target: str) -> int:
    model = model_of(target)
    read = asyncio.run(read_pointers(settings, model))
    pointers, entry = read if read is not None else (None, None)
    if target == model:
        version = pointers.stable if pointers is not None and pointers.stable else None
        manifest = registry.resolve(model, version)
    else:
        manifest = registry.resolve(model, target)
    listing = [] if read is None else [("served", listing_word(entry))] + (
        [("retired", entry.why_retired(model, manifest.id if manifest.id in entry.retired_versions else None))]
        if entry is not None and (entry.retired or manifest.id in entry.retired_versions) else [])
    print(format_pairs(describe(manifest) + ([] if pointers is None else describe_pointers(pointers)) + listing))
    return Exit.OK


def _fetch_remote(url: str, into: Path) -> None:
    """Copy manifest.json and every artifact it lists from an fsspec URL into `into`."""
    fs, root = url_filesystem(url, "registering from it")
    manifest_bytes: bytes = fs.cat_file(f"{root}/{MANIFEST_FILE}")
    manifest = ModelManifest.model_validate_json(manifest_bytes)
    for filename in manifest.files:
        target = into / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(f"{root}/{filename}", str(target))
    (into / MANIFEST_FILE).write_bytes(manifest_bytes)


def _copy_local(source: Path, into: Path) -> None:
    manifest = ModelManifest.model_validate_json((source / MANIFEST_FILE).read_text(encoding="utf-8"))
    for filename in manifest.files:
        target = into / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / filename, target)
    shutil.copy2(source / MANIFEST_FILE, into / MANIFEST_FILE)


def fetch_version(source: str, into: Path) -> None:
    """manifest.json and the files it lists, from a folder, a file:// URL, or any fsspec URL."""
    path = local_path_of(source)
    if path is None:
        _fetch_remote(source, into)
        return
    if not (path / MANIFEST_FILE).is_file():
        raise RegistryError(f"{path} holds no {MANIFEST_FILE}: not a model version folder")
    _copy_local(path, into)


def register_from(registry: ModelRegistry, source: str) -> ModelManifest:
    """Stage the version in a hidden folder, move it into place, then register (which checks every hash).

    Only manifest.json and the files it lists are copied; a version that fails its hashes or its
    check is removed again, so the registry never keeps a folder it refused.
    """
    registry.root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=registry.root, prefix=".incoming-"))
    try:
        fetch_version(source, staging)
        manifest = ModelManifest.model_validate_json((staging / MANIFEST_FILE).read_text(encoding="utf-8"))
        folder = registry.version_dir(manifest.name, manifest.id)
        if folder.exists():
            raise RegistryError(f"{folder} already exists: {manifest.id} is registered (or being built); "
                                "versions are immutable")
        (staging / MANIFEST_FILE).unlink()  # register() writes it, last and atomically
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        return registry.register(manifest)
    except RegistryError:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def cmd_register(registry: ModelRegistry, source: str) -> int:
    manifest = register_from(registry, source)
    print(f"registered {manifest.id} ({manifest.precision}) in {registry.version_dir(manifest.name, manifest.id)}")
    return Exit.OK


def change_summary(entry: AuditEntry) -> str:
    keys = ("stable", "candidate", "state", "stage", "percent", "previous")
    changed = [f"{k} {entry.before.get(k, '-')} -> {entry.after.get(k, '-')}" for k in keys
               if entry.before.get(k) != entry.after.get(k)]
    return "; ".join(changed) or "no change"


def history_rows(entries: Sequence[AuditEntry]) -> list[tuple[str, ...]]:
    return [(format_ms(e.time_ms), e.actor, e.action, change_summary(e), e.reason) for e in entries]


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("models", __doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="registered versions")
    listing.add_argument("model", nargs="?")
    show = commands.add_parser("show", help="one version's manifest and the model's pointers")
    show.add_argument("target", metavar="VERSION_OR_MODEL")
    register = commands.add_parser("register", help="copy a version folder into the registry and register it")
    register.add_argument("source", metavar="PATH_OR_URL")
    add_import_parser(commands)
    stable = commands.add_parser("set-stable", help="point stable at a version")
    stable.add_argument("model")
    stable.add_argument("version")
    stable.add_argument("--reason", default="set by hand")
    stable.add_argument("--actor", default=None, help="who to log; default $USER@host")
    retiring = commands.add_parser("retire", help="take a model, or one of its versions, out of service")
    retiring.add_argument("model")
    retiring.add_argument("version", nargs="?", default=None)
    retiring.add_argument("--reason", required=True)
    retiring.add_argument("--actor", default=None, help="who to log; default $USER@host")
    commands.add_parser("gateways", help="what each running gateway serves")
    history = commands.add_parser("history", help="pointer changes: who, when, what, why")
    history.add_argument("model")
    history.add_argument("--limit", type=int, default=20)
    args = parser.parse_args(argv)

    settings = FleetSettings()
    registry = ModelRegistry(settings.registry_dir)
    try:
        if args.command == "list":
            return cmd_list(settings, registry, args.model)
        if args.command == "show":
            return cmd_show(settings, registry, args.target)
        if args.command == "register":
            return cmd_register(registry, args.source)
        if args.command == "import":
            return cmd_import(settings, registry, args)
        if args.command == "set-stable":
            return asyncio.run(with_redis(settings, lambda redis: _set_stable(redis, registry, args)))
        if args.command == "retire":
            return asyncio.run(with_redis(settings, lambda redis: _retire(redis, registry, args)))
        if args.command == "gateways":
            return asyncio.run(with_redis(settings, _gateways))
        return asyncio.run(with_redis(settings, lambda redis: _history(redis, args.model, args.limit)))
    except (RegistryError, PointerError, CatalogError, ValueError, OSError) as exc:
        print(f"fleet models {args.command}: {exc}", file=sys.stderr)
        return Exit.FAILED


async def _set_stable(redis: AnyRedis, registry: ModelRegistry, args: Any) -> int:
    pointers = VersionPointers(redis, args.model, registry)
    state = await pointers.set_stable(args.version, args.actor or default_actor(), args.reason)
    print(f"{args.model}: stable is {state.stable}" + (f" (previous {state.previous})" if state.previous else ""))
    return Exit.OK


async def _retire(redis: AnyRedis, registry: ModelRegistry, args: Any) -> int:
    if args.version is not None:
        registry.resolve(args.model, args.version)  # raises ModelNotFound naming what exists
    elif args.model not in registered_models(registry) and await read_entry(redis, args.model) is None:
        print(f"fleet models retire: no model {args.model!r} in the registry ({registry.root}) or the catalogue",
              file=sys.stderr)
        return Exit.FAILED
    pointers = VersionPointers(redis, args.model)
    state = await pointers.get()
    serving = frozenset(v for v in (state.stable, state.candidate) if v is not None)
    actor = args.actor or default_actor()
    await retire(redis, args.model, args.version, actor, args.reason, serving=serving)
    await pointers.log("retire" + (f" {args.version}" if args.version else ""), actor, args.reason)
    what = f"version {args.version} of {args.model}" if args.version else args.model
    print(f"retired {what}: gateways refuse it within seconds" + ("" if args.version else
          f"; `fleet models set-stable {args.model} VERSION` serves it again"))
    live = [w for w in await list_workers(redis, args.model)
            if args.version is None or w.version == args.version]
    if live:
        print(f"{len(live)} worker(s) still run it ({', '.join(w.worker for w in live)}): stop them "
              f"(fleet workers stop, or scale the deployment to 0)")
    return Exit.OK


async def _gateways(redis: AnyRedis) -> int:
    beats = await list_gateways(redis)
    if not beats:
        print("no gateway has written a beat (gateways write one every FLEET_CATALOG_POLL_S)")
        return Exit.OK
    now_ms = time.time() * 1000
    rows = [(beat.gateway, ", ".join(beat.served) or "-",
             "FLEET_MODELS" if beat.allow_list is not None else "the catalogue",
             f"{max(now_ms - beat.written_ms, 0) / 1000:.1f}s ago") for beat in beats]
    print(format_table(("gateway", "serves", "following", "beat"), rows))
    return Exit.OK


async def _history(redis: AnyRedis, model: str, limit: int) -> int:
    entries = await VersionPointers(redis, model).history(limit)
    if not entries:
        print(f"{model}: no pointer changes logged")
        return Exit.OK
    print(format_table(("time", "actor", "action", "change", "reason"), history_rows(entries)))
    return Exit.OK


if __name__ == "__main__":
    raise SystemExit(main())
