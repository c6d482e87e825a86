"""Which flavour of ONNX Runtime and faiss this install has, and whether it can serve a device.

Both libraries come as a CPU and a GPU wheel that provide the same import (`onnxruntime`,
`faiss`) and overwrite each other's files; whichever was installed last wins, silently. So
pyproject.toml's extras `cpu` and `gpu` are exclusive, the base depends on neither, and this
module reads what is installed from the distributions' metadata (importlib.metadata) without
importing either library: a missing or doubled install is reported in one line that names the
fix, instead of an ImportError (or a CPU-only run) deep inside a worker.

What the install cannot do is refused here (`install_refusal`): no amount of waiting or
restarting gives a CPU wheel a CUDA provider. A device that the install could drive but that is
absent or broken on this machine is a health matter, not an install one: the worker loads, finds
it missing (models/backends/onnx.py, torch_backend.py) and reports `failed` (workers/worker.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata

FIX = "pip install '.[cpu]' or '.[gpu]' (scripts/lib.sh: FLEET_FLAVOUR=cpu|gpu)"
GPU_FIX = ("install the GPU flavour (onnxruntime-gpu and faiss-gpu: pip install '.[gpu]'; scripts/lib.sh: "
           "FLEET_FLAVOUR=gpu) or use the GPU image (compose/Dockerfile.gpu), or run with FLEET_DEVICE=cpu")
# PyPI's torch wheels for Linux x86_64 are CUDA builds; the CPU image installs torch's CPU-only wheel.
TORCH_FIX = ("install torch's CUDA build (PyPI's wheel for Linux x86_64, as constraints.txt pins it) or use the "
             "GPU image (compose/Dockerfile.gpu), or run this worker with FLEET_DEVICE=cpu")
CUDA_PROVIDER = "CUDAExecutionProvider"
# The distributions that provide each import, by flavour; pyproject.toml's extras `cpu` and `gpu`
# name the first of each (tests/unit/test_install_flavours.py holds them together). faiss-gpu-cu12
# and -cu11 are the community GPU wheels that came before Meta's own faiss-gpu.
FLAVOURS: Mapping[str, Mapping[str, str]] = {
    "onnxruntime": {"onnxruntime": "cpu", "onnxruntime-gpu": "gpu"},
    "faiss": {"faiss-cpu": "cpu", "faiss-gpu": "gpu", "faiss-gpu-cu12": "gpu", "faiss-gpu-cu11": "gpu"},
}
IMPORTS = tuple(FLAVOURS)


@dataclass(frozen=True)
class Dist:
    name: str
    version: str

    @property
    def flavour(self) -> str:
        """cpu, gpu, or the distribution's own name for a flavour we do not ship (e.g. onnxruntime-openvino)."""
        name = re.sub(r"[-_.]+", "-", self.name).lower()  # as PEP 503 compares distribution names
        return next((flavour for names in FLAVOURS.values() for dist, flavour in names.items() if dist == name),
                    self.name)

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


@dataclass(frozen=True)
class Installed:
    """The distributions providing each of IMPORTS (none, one, or, in a broken install, several)."""

    providers: Mapping[str, tuple[Dist, ...]]

    @classmethod
    def here(cls) -> Installed:
        found = metadata.packages_distributions()
        return cls({name: tuple(sorted({Dist(dist, metadata.version(dist)) for dist in found.get(name, [])},
                                       key=lambda d: d.name)) for name in IMPORTS})

    @property
    def flavour(self) -> str:
        """cpu or gpu; "mixed (cpu, gpu)" when the providers disagree; "none" when there are none."""
        flavours = sorted({dist.flavour for dists in self.providers.values() for dist in dists})
        if not flavours:
            return "none"
        return flavours[0] if len(flavours) == 1 else f"mixed ({', '.join(flavours)})"

    def problems(self, imports: tuple[str, ...] = IMPORTS) -> list[str]:
        """One line per import of `imports` that no distribution provides or that several do."""
        found = []
        for name in imports:
            dists = self.providers[name]
            if not dists:
                found.append(f"no installed distribution provides `import {name}`: {FIX}")
            elif len(dists) > 1:
                both = " and ".join(str(dist) for dist in dists)
                found.append(f"`import {name}` is provided by both {both}, which overwrite each other's files: "
                             f"pip uninstall -y {' '.join(d.name for d in dists)}, then {FIX}")
        return found


def needed_imports(backend: str, semantic_cache: bool) -> tuple[str, ...]:
    """What a worker imports: ONNX Runtime for its model (backend onnxruntime) and for the semantic
    cache's encoder; faiss for the semantic cache's index."""
    onnx = backend == "onnxruntime" or semantic_cache
    return tuple(name for name, needed in (("onnxruntime", onnx), ("faiss", semantic_cache)) if needed)


def install_refusal(device: str, backend: str, *, semantic_cache: bool,
                    installed: Installed | None = None) -> str | None:
    """Why this install cannot run a worker with these settings, naming the fix; None when it can.

    On device cuda: ONNX Runtime must have its CUDA provider (the GPU wheel) wherever it runs the
    model or the cache's encoder, and torch must be a CUDA build for backend torch. The semantic
    cache's faiss index runs on the CPU on every device (workers/cache/semantic.py), so either faiss
    flavour serves it. Whether a GPU is really there is not asked here: see the module's docstring.
    """
    installed = installed if installed is not None else Installed.here()
    imports = needed_imports(backend, semantic_cache)
    problems = installed.problems(imports)
    if problems:
        return problems[0]
    if device != "cuda":
        return None
    if "onnxruntime" in imports:
        import onnxruntime

        available = onnxruntime.get_available_providers()
        if CUDA_PROVIDER not in available:
            [dist] = installed.providers["onnxruntime"]
            return (f"device cuda needs ONNX Runtime's {CUDA_PROVIDER}, but the installed {dist} "
                    f"({dist.flavour} flavour) has only {', '.join(available)}: {GPU_FIX}")
    if backend == "torch":
        import torch

        if torch.version.cuda is None:
            return (f"device cuda with backend torch needs a CUDA build of PyTorch, but torch {torch.__version__} "
                    f"is a CPU-only build: {TORCH_FIX}")
    return None
