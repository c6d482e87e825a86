"""`fleet models import SOURCE --name NAME [--task T] [--int8]`: a team's own model becomes a version.

SOURCE is a local path or an fsspec URL (file://, s3://, ... as `fleet models register` takes):
an ONNX file (with tokenizer.json beside it for a text model), a transformers folder, a
sentence-transformers folder, a pickled scikit-learn / XGBoost / LightGBM estimator, or an XGBoost /
LightGBM booster file (what their save_model wrote: .json, .ubj, .txt). The
manifest is derived; the graph is checked against the source framework and in batches of 1, 3
and 8 before anything registers. Exit 0: registered; 1: refused (the message says why).
"""

from __future__ import annotations

import argparse
import sys

from fleet.exits import Exit
from models import ImportSource, ModelManifest, ModelRegistry, Progress
from schemas.tasks import TASKS


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
    parser.add_argument("--max-length", type=int, default=None, help="text models: longest token sequence "
                        "(default: from the tokenizer or config)")


def cmd_import(registry: ModelRegistry, args: argparse.Namespace) -> int:
    # The importers pull in torch, transformers and the converters: only when importing.
    from models import ImportRequest, import_model, parse_labels

    request = ImportRequest(name=args.name, task=args.task, int8=args.int8,
                            labels=parse_labels(args.labels) if args.labels is not None else None,
                            max_length=args.max_length)
    manifests = import_model(registry, args.source, request, Progress(sys.stderr))
    for manifest in manifests:
        print(f"registered {manifest.id} ({manifest.precision}, task {manifest.task}) in "
              f"{registry.version_dir(manifest.name, manifest.id)}")
    print(f"next: fleet models set-stable {args.name} {manifests[0].id}   (or fleet rollout start ...)")
    return Exit.OK


def source_cell(manifest: ModelManifest, *, short: bool = False) -> str:
    """Where a version came from: the package it was built from, or what was imported (short: for tables)."""
    source = manifest.source
    if isinstance(source, ImportSource):
        return f"import {source.format}" if short else \
            f"import {source.format} {source.uri} ({len(source.sha256)} files hashed)"
    return source.package if short else f"{source.package} {source.package_version} ({source.base_model})"
