"""`fleet models import SOURCE --name NAME [--task T] [--int8]`: a team's own model becomes a version.

SOURCE is a local path or an fsspec URL (file://, s3://, ... as `fleet models register` takes):
an ONNX file (with tokenizer.json beside it for a text model), a transformers folder, a
sentence-transformers folder, a pickled scikit-learn / XGBoost / LightGBM estimator, or an XGBoost /
LightGBM booster file (what their save_model wrote: .json, .ubj, .txt). The
manifest is derived; the graph is checked against the source framework and in batches of 1, 3
and 8 before anything registers. Exit 0: registered; 1: refused (the message says why).

An ONNX file exported elsewhere can be told what it leaves open: `--output` (which output is the
answer), `--pooling mean|cls` and `--normalize` (token vectors into one unit vector a text),
`--input input_ids=ids` (the graph's own input names), `--tokenizer PATH` (kept apart from it).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from common.redis_cluster import AnyRedis
from common.settings import FleetSettings
from fleet.arguments import default_actor
from fleet.commands.redis_access import with_redis
from fleet.exits import Exit
from models import ImportSource, ModelManifest, ModelRegistry, Progress
from schemas.tasks import TASKS
from versions import VersionPointers

# The pooling modes models.importing takes (named here: building the parser loads none of models).
POOLINGS = ("mean", "cls")


def _input_pair(text: str) -> tuple[str, str]:
    tokenizer_name, equals, graph_name = text.partition("=")
    if not equals or not tokenizer_name.strip() or not graph_name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not TOKENIZER_NAME=GRAPH_NAME (e.g. input_ids=ids)")
    return tokenizer_name.strip(), graph_name.strip()


def add_import_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser("import", help="derive, check and register a version from your own model files")
    parser.add_argument("source", metavar="PATH_OR_URL", help="ONNX file, transformers or sentence-transformers "
                        "folder, a pickled scikit-learn/XGBoost/LightGBM estimator, or an XGBoost/LightGBM booster "
                        "file (save_model: .json, .ubj, .txt)")
    parser.add_argument("--name", required=True, help="model name: lowercase letters, digits and dashes")
    parser.add_argument("--task", choices=TASKS, default=None, help="default: read from the source")
    parser.add_argument("--int8", action="store_true", help="also register an INT8 version (gated on FP32 agreement)")
    parser.add_argument("--labels", default=None, help="classifier labels in column order: a,b,c or @file "
                        "(default: id2label of the source's config.json)")
    parser.add_argument("--stable", action="store_true", help="make the new (FP32) version stable at once (audited): "
                        "every running gateway serves it within FLEET_CATALOG_POLL_S, and a worker started for the "
                        "model loads it")
    parser.add_argument("--reason", default="imported", help="with --stable: the reason the audit log gives")
    parser.add_argument("--max-length", type=int, default=None, help="text models: longest token sequence "
                        "(default: from the tokenizer or config)")
    onnx_file = parser.add_argument_group("ONNX files exported elsewhere", "what the file leaves open; the graph "
                                          "is edited into the one the workers serve, and checked against "
                                          "ONNX Runtime on the file as given")
    onnx_file.add_argument("--output", metavar="NAME", default=None, help="the graph output to serve (the others "
                           "are dropped); default: an embedding's one possible output, else the first")
    onnx_file.add_argument("--pooling", choices=POOLINGS, default=None, help="embedding: pool a vector per token "
                           "[batch, sequence, width] into one a text: mean over the attention mask, or cls (the "
                           "first token)")
    onnx_file.add_argument("--normalize", action="store_true", help="embedding: L2-normalise each row")
    onnx_file.add_argument("--input", dest="inputs", metavar="TOKENIZER_NAME=GRAPH_NAME", action="append",
                           type=_input_pair, default=None, help="what the graph calls a tokenizer input (input_ids, "
                           "attention_mask, token_type_ids), e.g. --input input_ids=ids; repeat for each")
    onnx_file.add_argument("--tokenizer", metavar="PATH", type=Path, default=None, help="tokenizer.json, or a "
                           "folder holding the tokenizer (default: beside the graph)")


def cmd_import(settings: FleetSettings, registry: ModelRegistry, args: argparse.Namespace) -> int:
    # The importers pull in torch, transformers and the converters: only when importing.
    from models import ImportRequest, import_model, parse_labels

    request = ImportRequest(name=args.name, task=args.task, int8=args.int8,
                            labels=parse_labels(args.labels) if args.labels is not None else None,
                            max_length=args.max_length, output=args.output, pooling=args.pooling,
                            normalize=args.normalize, inputs=tuple(args.inputs or ()), tokenizer=args.tokenizer)
    manifests = import_model(registry, args.source, request, Progress(sys.stderr))
    for manifest in manifests:
        print(f"registered {manifest.id} ({manifest.precision}, task {manifest.task}) in "
              f"{registry.version_dir(manifest.name, manifest.id)}")
    if not args.stable:
        print(f"next: fleet models set-stable {args.name} {manifests[0].id}   (or fleet rollout start ...)")
        return Exit.OK
    return asyncio.run(with_redis(settings, lambda redis: _make_stable(redis, registry, manifests[0], args.reason)))


async def _make_stable(redis: AnyRedis, registry: ModelRegistry, manifest: ModelManifest, reason: str) -> int:
    state = await VersionPointers(redis, manifest.name, registry).set_stable(manifest.id, default_actor(), reason)
    print(f"{manifest.name}: stable is {state.stable}" + (f" (previous {state.previous})" if state.previous else ""))
    print(f"next: fleet scale {manifest.name} --workers 1   (a worker for it; gateways serve it already)")
    return Exit.OK


def source_cell(manifest: ModelManifest, *, short: bool = False) -> str:
    """Where a version came from: the package it was built from, or what was imported (short: for tables)."""
    source = manifest.source
    if isinstance(source, ImportSource):
        return f"import {source.format}" if short else \
            f"import {source.format} {source.uri} ({len(source.sha256)} files hashed)"
    return source.package if short else f"{source.package} {source.package_version} ({source.base_model})"
