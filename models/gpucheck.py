"""`python -m models.gpucheck` (or `scripts/gpu-check`): the torch backend on a real CUDA device.

Self-contained (no Kafka, no Redis), about a minute on a GPU:

1. accuracy: the newest FP32 version (with PyTorch artifacts) on CUDA in FP16 against the
   same version on CPU in FP32 (torch) and in ONNX Runtime: per-sentence cosine, min and mean;
   and FP16 length sub-batches against one row at a time (padding must not matter);
2. out of memory: most of the GPU's free memory is taken first, then a batch that cannot fit
   is run; it must come out as DeviceOutOfMemory with the cache emptied, and a small batch must
   still run on the same backend afterwards (what the worker's batch splitting relies on).

Prints the figures, optionally writes them as JSON (--json), and exits 0 when every check
passed, 1 when one failed. Without a CUDA device it prints "no CUDA device: skipped" and
exits 0, so it is safe to run anywhere.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

from common.settings import FleetSettings
from models.backends.errors import DeviceError, DeviceOutOfMemory
from models.backends.onnx import OnnxEmbeddingBackend
from models.backends.options import RuntimeOptions
from models.backends.torch_backend import TorchEmbeddingBackend
from models.build.sentences import SERVING_SENTENCES
from models.registry import ModelManifest, ModelNotFound, ModelRegistry

MODEL_NAME = "minilm-embed"
MIN_COSINE = 0.999
OOM_ROWS = 4096  # x max_input_tokens: several GiB of FP16 activations, far beyond the margin left free
OOM_MARGIN_BYTES = 512 << 20


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m models.gpucheck", description=__doc__.splitlines()[0])
    parser.add_argument("--registry", type=Path, default=None,
                        help="model registry folder (default: FLEET_MODEL_DIR, else <FLEET_HOME>/models)")
    parser.add_argument("--version", default=None,
                        help="version id to check (default: the newest FP32 with torch artifacts)")
    parser.add_argument("--build", action="store_true", help="build the models first if no FP32 version with "
                        "PyTorch artifacts is registered (needs the [build] extra)")
    parser.add_argument("--min-cosine", type=float, default=MIN_COSINE, help="fail below this per-sentence cosine")
    parser.add_argument("--skip-oom", action="store_true", help="only the accuracy part")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    return parser.parse_args(argv)


def _cosines(left: npt.NDArray[np.float32], right: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    left64, right64 = left.astype(np.float64), right.astype(np.float64)
    norms = np.linalg.norm(left64, axis=1) * np.linalg.norm(right64, axis=1)
    return np.asarray((left64 * right64).sum(axis=1) / norms)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return 0
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", flush=True)

    registry = ModelRegistry(args.registry if args.registry is not None else FleetSettings().registry_dir)
    manifest = _manifest_to_check(registry, args, say)
    if manifest is None:
        return 1
    name = torch.cuda.get_device_name()
    say(f"{manifest.id} on {name}; torch {torch.__version__} (CUDA {torch.version.cuda})")
    figures: dict[str, object] = {"version": manifest.id, "gpu": name, "torch": torch.__version__,
                                  "sentences": len(SERVING_SENTENCES)}
    texts = list(SERVING_SENTENCES)
    gpu, on_gpu, failures = _accuracy(registry, manifest, texts, figures, say, args.min_cosine)
    _time_a_batch(gpu, texts, figures, say)
    if not args.skip_oom:
        failures += _out_of_memory(gpu, on_gpu, texts, figures, say, args.min_cosine)

    figures["passed"] = not failures
    figures["failures"] = failures
    figures["total_s"] = round(time.monotonic() - started, 1)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    for failure in failures:
        print(f"FAILED: {failure}")
    say("all GPU checks passed" if not failures else f"{len(failures)} GPU check(s) failed")
    return 0 if not failures else 1


def _manifest_to_check(registry: ModelRegistry, args: argparse.Namespace,
                       say: Callable[[str], None]) -> ModelManifest | None:
    """The version to check (built first with --build when there is none); None after printing why not."""

    def find() -> ModelManifest | None:
        if args.version is not None:
            return registry.resolve(MODEL_NAME, version=args.version)
        with_torch = [m for m in registry.versions(MODEL_NAME) if m.precision == "fp32" and m.torch_dir is not None]
        return with_torch[-1] if with_torch else None

    try:
        manifest = find()
    except ModelNotFound as error:
        print(f"FAILED: {error}")
        return None
    if manifest is None and args.build:
        from models.build.__main__ import main as build_models

        say(f"no FP32 version with PyTorch artifacts in {registry.root}: building")
        if build_models(["--registry", str(registry.root)]) != 0:
            print("FAILED: model build")
            return None
        manifest = find()
    if manifest is None:
        print(f"FAILED: no FP32 version of {MODEL_NAME} with PyTorch artifacts in {registry.root}; run "
              "scripts/build-models (or pass --build)")
    return manifest


def _accuracy(registry: ModelRegistry, manifest: ModelManifest, texts: list[str], figures: dict[str, object],
              say: Callable[[str], None], min_cosine: float,
              ) -> tuple[TorchEmbeddingBackend, npt.NDArray[np.float32], list[str]]:
    """CUDA FP16 against CPU FP32 (torch and ONNX Runtime) and against one row at a time: the
    loaded GPU backend, its rows for `texts`, and the failures."""
    failures: list[str] = []
    load_started = time.monotonic()
    gpu = TorchEmbeddingBackend.load(registry, manifest, RuntimeOptions(device="cuda", warmup=True))
    figures["cuda_load_s"] = round(time.monotonic() - load_started, 2)
    cpu = TorchEmbeddingBackend.load(registry, manifest)
    onnx = OnnxEmbeddingBackend.load(registry, manifest)
    on_gpu = gpu.infer(texts)
    assert gpu.dtype == "float16" and on_gpu.dtype == np.float32
    one_by_one = np.concatenate([gpu.infer([text]) for text in texts])
    for label, reference in (("cpu_fp32_torch", cpu.infer(texts)), ("cpu_fp32_onnx", onnx.infer(texts)),
                             ("cuda_fp16_one_by_one", one_by_one)):
        cosines = _cosines(on_gpu, reference)
        figures[f"cosine_vs_{label}_min"] = float(cosines.min())
        figures[f"cosine_vs_{label}_mean"] = float(cosines.mean())
        worst = int(np.argmin(cosines))
        say(f"CUDA FP16 vs {label}: cosine min {cosines.min():.6f} (sentence {worst}), mean {cosines.mean():.6f}")
        if cosines.min() < min_cosine:
            failures.append(f"cosine vs {label} {cosines.min():.6f} < {min_cosine} on {texts[worst][:60]!r}")
    norms = np.linalg.norm(on_gpu, axis=1)
    figures["norm_max_abs_error"] = float(np.abs(norms - 1.0).max())
    return gpu, on_gpu, failures


def _time_a_batch(gpu: TorchEmbeddingBackend, texts: list[str], figures: dict[str, object],
                  say: Callable[[str], None]) -> None:
    encoded = gpu.encode((texts * 2)[:32])
    timings = []
    for _ in range(20):
        run_started = time.perf_counter()
        gpu.run(encoded)
        timings.append(time.perf_counter() - run_started)
    figures["cuda_batch32_run_ms_median"] = round(1000 * float(np.median(timings)), 3)
    say(f"CUDA FP16 run of a 32-row mixed batch: median {figures['cuda_batch32_run_ms_median']} ms")


def _out_of_memory(gpu: TorchEmbeddingBackend, before: npt.NDArray[np.float32], texts: list[str],
                   figures: dict[str, object], say: Callable[[str], None], min_cosine: float) -> list[str]:
    failures: list[str] = []
    one_padded_batch = copy.copy(gpu)
    one_padded_batch.length_bucket_size = 0  # the whole batch as one sub-batch: rows x max tokens
    huge = one_padded_batch.encode(["overflow " * 300] * OOM_ROWS)
    rows, tokens = huge.chunks[0].feeds["input_ids"].shape
    free, total = torch.cuda.mem_get_info()
    hog_bytes = max(free - OOM_MARGIN_BYTES, 0)
    hog = torch.empty(hog_bytes, dtype=torch.uint8, device="cuda")
    say(f"took {hog_bytes / 2**30:.1f} GiB of {total / 2**30:.1f} GiB, leaving ~{OOM_MARGIN_BYTES >> 20} MiB; "
        f"running {rows} x {tokens} tokens")
    try:
        oom_started = time.monotonic()
        try:
            one_padded_batch.run(huge)
        except DeviceOutOfMemory as error:
            figures["oom_caught_as"] = type(error).__name__
            figures["oom_message"] = str(error)[:300]
            figures["oom_is_device_error"] = isinstance(error, DeviceError)
            say(f"caught {type(error).__name__} after {time.monotonic() - oom_started:.2f}s: {str(error)[:160]}")
        except Exception as error:  # noqa: BLE001 - reported as the failure it is
            failures.append(f"OOM surfaced as {type(error).__module__}.{type(error).__name__}, not DeviceOutOfMemory")
            say(f"OOM surfaced as {type(error).__name__}: {str(error)[:160]}")
        else:
            failures.append(f"a {rows} x {tokens} batch ran with ~{OOM_MARGIN_BYTES >> 20} MiB free: no OOM to catch")
        # run() emptied the cache: what torch still reserves is (about) the hog, nothing of the failed batch.
        leftover = torch.cuda.memory_reserved() - hog_bytes
        figures["reserved_beyond_hog_after_oom_mib"] = round(leftover / 2**20, 1)
        small = gpu.infer(texts[:4])  # still short of memory: a small batch must fit
        figures["small_batch_after_oom_ok"] = bool(_cosines(small, before[:4]).min() >= min_cosine)
        say(f"after the OOM: {leftover / 2**20:.1f} MiB reserved beyond the hog; a 4-row batch "
            f"{'ran and matches' if figures['small_batch_after_oom_ok'] else 'DIFFERS'}")
        if not figures["small_batch_after_oom_ok"]:
            failures.append("a small batch after the OOM gave different rows")
    finally:
        del hog
        torch.cuda.empty_cache()
    again = gpu.infer(texts)
    figures["after_oom_max_abs_diff"] = float(np.abs(again - before).max())
    say(f"memory back: the full sentence set again, max abs diff {figures['after_oom_max_abs_diff']:.2e} from before")
    return failures


if __name__ == "__main__":
    sys.exit(main())
