"""`fleet`: the operator's command line. Each subcommand hands over to the module that owns it.

    fleet build-models [--force]    build and register the model versions
    fleet topics [MODEL ...]        create the request, DLQ and results topics
    fleet lag | scale | consistency operate consumer groups, check served answers
    fleet workers | drain | undrain live workers and taking one out of service
    fleet models | rollout | shadow model versions, staged rollout, shadow comparisons
    fleet cache clear|stats         result caches (cache-eval: the semantic cache's check)
    fleet debug on|off|status|tail  redacted per-request traces for a bounded time
    fleet keys create|list|revoke   the gateway's API keys, one tenant each
    fleet batch submit|status|results|cancel|list  batch jobs: a JSONL file in, one answer per line out
    fleet dlq list|show|replay|purge  dead letters, masked; replay them to their request topic
    fleet console                   the operator's web console (the same functions as these commands)
    fleet doctor [--device cuda]    what this install runs on: ONNX Runtime / faiss flavour, providers, GPUs

The local stack, the demo, the benchmarks, chaos and the maintainer's training are not part of
the installed package: they run from a source checkout (scripts/stack, scripts/demo,
scripts/bench, scripts/chaos, scripts/train-models; the code is in fleet_dev/).
"""

import argparse
import asyncio
import importlib
import sys
from collections.abc import Callable

from common.settings import FleetSettings
from common.topics import ensure_topics
from fleet.exits import Exit
from fleet.unreachable import run_command
from schemas.names import DEFAULT_RESULTS_TOPIC, DLQ_TOPIC, fallback_topic, requests_topic

DELEGATES = {
    "build-models": ("models.build.__main__", "build and register model versions"),
    "written-pairs": ("models.build.written_pairs", "add written question-pair sets to the cache verifier's "
                      "training or calibration data, without the pairs near a text of the honest test sets"),
    "lag": ("fleet.commands.lag", "consumer-group lag per partition and the estimated time to drain it"),
    "scale": ("fleet.commands.scale", "start or stop local worker processes of a model (--workers N, --status)"),
    "consistency": ("fleet.commands.consistency", "check served embeddings against an offline recomputation"),
    "debug": ("fleet.commands.debug", "switch redacted per-request traces on for a while; tail them"),
    "workers": ("fleet.commands.workers", "live workers: role, device, health, lag, version, heartbeat age"),
    "drain": ("fleet.commands.workers:drain_main", "take a worker out of service until undrained"),
    "undrain": ("fleet.commands.workers:undrain_main", "let a drained worker take work again"),
    "models": ("fleet.commands.models", "registered versions, their manifests and pointers; register a version"),
    "rollout": ("fleet.commands.rollout", "staged rollout of a candidate: start | status | promote | pause | resume | rollback"),
    "shadow": ("fleet.commands.shadow", "shadow the candidate version: run | replay a past window | report agreement"),
    "cache": ("fleet.commands.cache", "clear or inspect a model's result caches"),
    "cache-eval": ("fleet.commands.cache_eval", "semantic cache false-hit evaluation on paraphrase and near-miss pairs"),
    "keys": ("fleet.commands.keys", "the gateway's API keys: create (shown once) | list | revoke"),
    "batch": ("fleet.commands.batch", "batch jobs: submit a JSONL file | status | results | cancel | list"),
    "dlq": ("fleet.commands.dlq", "dead letters: list | show (masked) | replay to their request topic | purge"),
    "console": ("fleet.console.main", "the operator's web console: workers, lag, versions, dead letters, tenants"),
    "doctor": ("fleet.commands.doctor", "what this install runs on: the ONNX Runtime and faiss flavour, their "
               "providers and GPU support, torch's CUDA devices, versions"),
}

# The extra of pyproject.toml a command needs beyond the base install (for `models`: its `import`,
# for `shadow`: its `run` and `replay`). Run without it, the command ends with one line naming the
# install instead of an ImportError's traceback.
EXTRAS = {"build-models": "build", "written-pairs": "build", "consistency": "worker", "cache-eval": "worker",
          "shadow": "worker", "models": "import", "console": "console"}
OWN_PACKAGES = frozenset({"schemas", "common", "models", "versions", "workers", "gateway", "fleet"})


# Commands that only read, or write what a second run writes the same: when Kafka or Redis does
# not answer they are run again until FLEET_STARTUP_TIMEOUT_S has passed. The others (processes,
# benchmarks, `keys create` whose key is shown once) say at once that a server is down.
WAIT_FOR_OUTAGES = frozenset({"topics", "lag", "workers", "drain", "undrain", "models", "rollout", "cache", "debug",
                              "consistency"})


def waiting_for(command: str) -> float:
    return FleetSettings().startup_timeout_s if command in WAIT_FOR_OUTAGES else 0.0


def create_topics(models: list[str], partitions: int) -> int:
    settings = FleetSettings()
    names = [DLQ_TOPIC, DEFAULT_RESULTS_TOPIC]
    for model in models:
        names += [requests_topic(model), fallback_topic(model)]
    asyncio.run(ensure_topics(settings, names, partitions))
    print("topics ready: " + ", ".join(names))
    return Exit.OK


def parser() -> argparse.ArgumentParser:
    """`fleet`'s own parser: it picks the command; each delegate parses (and helps with) the rest."""
    fleet = argparse.ArgumentParser(prog="fleet", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = fleet.add_subparsers(dest="command", required=True)
    for name, (_, summary) in DELEGATES.items():
        # argparse %-formats help texts; a summary is plain prose, so its % signs are literal.
        commands.add_parser(name, help=summary.replace("%", "%%"), add_help=False)
    topics = commands.add_parser("topics", help="create the fleet's topics")
    topics.add_argument("models", nargs="*", default=["minilm-embed"])
    topics.add_argument("--partitions", type=int, default=4)
    return fleet


def delegate(command: str) -> Callable[[list[str]], object]:
    """The entry point (`main` unless DELEGATES names another) of the module that owns `command`."""
    module, _, function = DELEGATES[command][0].partition(":")
    entry: Callable[[list[str]], object] = getattr(importlib.import_module(module), function or "main")
    return entry


def missing_extra(command: str, exc: ModuleNotFoundError) -> str:
    extra = EXTRAS.get(command)
    fix = (f"pip install 'kafka-inference-fleet[{extra}]'" if extra is not None
           else "the extras table of docs/getting-started.md says which extra brings it")
    return f"fleet {command}: this install has no module {exc.name!r}; {fix}"


def run_delegate(command: str, rest: list[str]) -> object:
    """The command's entry point on `rest`; a third-party module this install lacks is one line
    (Exit.UNAVAILABLE), a module of ours that is missing stays a traceback (a bug)."""
    try:
        return delegate(command)(rest)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in OWN_PACKAGES:
            raise
        print(missing_extra(command, exc), file=sys.stderr)
        return Exit.UNAVAILABLE


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    fleet = parser()
    args, rest = fleet.parse_known_args(argv)
    if args.command in DELEGATES:
        raise SystemExit(run_command(args.command, lambda: run_delegate(args.command, rest),
                                     wait_s=waiting_for(args.command)))
    if rest:
        fleet.error(f"unrecognized arguments: {' '.join(rest)}")
    raise SystemExit(run_command(args.command, lambda: create_topics(args.models, args.partitions),
                                 wait_s=waiting_for("topics")))


if __name__ == "__main__":
    main()
