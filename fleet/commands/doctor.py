"""`fleet doctor`: what this install can run on. Needs neither Kafka nor Redis.

    fleet doctor                  the flavour, versions, providers and devices
    fleet doctor --device cuda    also: can this install serve a CUDA worker, and is a GPU visible
    fleet doctor --json           the same as JSON

It prints which distributions provide `onnxruntime` and `faiss` (the CPU or GPU flavour, see
pyproject.toml's extras `cpu` and `gpu`) and their versions, ONNX Runtime's execution providers,
faiss's GPU support and GPU count, torch's version, CUDA build and visible devices, and Python's
version. Exits 0 when exactly one distribution provides each of `onnxruntime` and `faiss`; 1 with
one line per problem when none does or both flavours do (and, with --device cuda, when a CUDA
worker would be refused at start or sees no GPU).
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from fleet.arguments import command_parser
from fleet.exits import Exit
from fleet.tables import format_pairs
from models import Installed, install_refusal

NO_GPU = ("no CUDA device is visible to torch: check the NVIDIA driver (nvidia-smi), the container's GPU "
          "(docker compose --profile gpu: the device reservation; Kubernetes: nvidia.com/gpu) and CUDA_VISIBLE_DEVICES")


@dataclass
class Report:
    python: str
    flavour: str
    onnxruntime: dict[str, Any]
    faiss: dict[str, Any]
    torch: dict[str, Any]
    problems: list[str] = field(default_factory=list)


def imported(name: str, read: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """What `read` finds in module `name`, or why it does not import: a broken install is a finding."""
    try:
        module = __import__(name)
    except Exception as exc:  # noqa: BLE001 - any failure to import is what the doctor reports
        return {"error": f"cannot import {name}: {type(exc).__name__}: {exc}"}
    return read(module)


def onnxruntime_facts(ort: Any) -> dict[str, Any]:
    return {"version": ort.__version__, "providers": list(ort.get_available_providers())}


def faiss_facts(faiss: Any) -> dict[str, Any]:
    # StandardGpuResources exists only in a GPU build; get_num_gpus exists (and says 0) in both.
    gpu = hasattr(faiss, "StandardGpuResources")
    return {"version": faiss.__version__, "gpu_support": gpu, "gpus": int(faiss.get_num_gpus()) if gpu else 0}


def torch_facts(torch: Any) -> dict[str, Any]:
    available = bool(torch.cuda.is_available())
    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if available else []
    return {"version": torch.__version__, "cuda_build": torch.version.cuda, "cuda_available": available,
            "devices": devices}


def examine(device: str | None, installed: Installed | None = None) -> Report:
    installed = installed if installed is not None else Installed.here()
    dists = {name: [str(dist) for dist in found] for name, found in installed.providers.items()}
    report = Report(python=f"{platform.python_version()} ({platform.python_implementation()})",
                    flavour=installed.flavour,
                    onnxruntime={"distributions": dists["onnxruntime"]}, faiss={"distributions": dists["faiss"]},
                    torch=imported("torch", torch_facts), problems=installed.problems())
    if dists["onnxruntime"]:
        report.onnxruntime |= imported("onnxruntime", onnxruntime_facts)
    if dists["faiss"]:
        report.faiss |= imported("faiss", faiss_facts)
    if device == "cuda":
        for backend in ("onnxruntime", "torch"):
            refusal = install_refusal("cuda", backend, semantic_cache=False, installed=installed)
            if refusal is not None and refusal not in report.problems:
                report.problems.append(refusal)
        if report.torch.get("cuda_build") and not report.torch.get("cuda_available"):
            report.problems.append(NO_GPU)
    return report


def pairs(report: Report) -> list[tuple[str, str]]:
    def found(facts: dict[str, Any]) -> str:
        return ", ".join(facts["distributions"]) or "not installed"

    ort, faiss, torch = report.onnxruntime, report.faiss, report.torch
    rows = [("python", report.python), ("flavour", report.flavour), ("onnxruntime", found(ort))]
    rows.append(("  providers", ort.get("error") or ", ".join(ort.get("providers", [])) or "-"))
    rows.append(("faiss", found(faiss)))
    gpu = "-" if not faiss["distributions"] else faiss.get("error") or (
        f"yes, {faiss['gpus']} GPU(s) visible" if faiss["gpu_support"] else "no (CPU build)")
    rows.append(("  GPU support", gpu))
    if "error" in torch:
        return [*rows, ("torch", torch["error"])]
    build = f"CUDA {torch['cuda_build']} build" if torch["cuda_build"] else "CPU-only build"
    rows.append(("torch", f"{torch['version']} ({build})"))
    rows.append(("  CUDA devices", ", ".join(torch["devices"]) or "none visible"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("doctor", __doc__)
    parser.add_argument("--device", choices=("cuda",), default=None,
                        help="also check what a worker with FLEET_DEVICE=cuda needs: the GPU flavour, torch's CUDA "
                             "build, a visible GPU")
    parser.add_argument("--json", action="store_true", help="print JSON instead of lines")
    args = parser.parse_args(argv)
    report = examine(args.device)
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    else:
        print(format_pairs(pairs(report)))
        for problem in report.problems:
            print(f"problem: {problem}")
        if not report.problems:
            print(f"ok: flavour {report.flavour}" + (", CUDA usable" if args.device == "cuda" else ""))
    return Exit.FAILED if report.problems else Exit.OK


if __name__ == "__main__":
    raise SystemExit(main())
