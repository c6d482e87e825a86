"""What an install is refused for, before a worker connects anywhere: no flavour, both flavours, and on
device cuda the CPU wheel of ONNX Runtime or a CPU-only torch. What the install could serve is never
refused here (a GPU that is absent is the worker's `failed` state, not an install problem)."""

from __future__ import annotations

import onnxruntime
import pytest
import torch

from models.backends.flavour import CUDA_PROVIDER, Dist, Installed, install_refusal, needed_imports

CPU = Installed({"onnxruntime": (Dist("onnxruntime", "1.32.0"),), "faiss": (Dist("faiss-cpu", "1.15.1"),)})
GPU = Installed({"onnxruntime": (Dist("onnxruntime-gpu", "1.31.1"),), "faiss": (Dist("faiss-gpu", "1.15.1"),)})
NONE = Installed({"onnxruntime": (), "faiss": ()})
BOTH = Installed({"onnxruntime": (Dist("onnxruntime", "1.32.0"), Dist("onnxruntime-gpu", "1.31.1")),
                  "faiss": (Dist("faiss-cpu", "1.15.1"),)})


@pytest.fixture
def cuda_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """ONNX Runtime as the GPU wheel lists its providers (it does so with or without a GPU)."""
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: [CUDA_PROVIDER, "CPUExecutionProvider"])


@pytest.fixture
def cpu_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])


def test_the_flavour_is_named_from_the_distributions() -> None:
    assert (CPU.flavour, GPU.flavour, NONE.flavour, BOTH.flavour) == ("cpu", "gpu", "none", "mixed (cpu, gpu)")
    assert CPU.problems() == GPU.problems() == []


def test_this_install_has_one_distribution_per_import() -> None:
    here = Installed.here()
    assert here.problems() == [], here.problems()
    assert here.flavour in ("cpu", "gpu")


def test_no_flavour_and_both_flavours_are_problems_that_name_the_fix() -> None:
    missing = NONE.problems()
    assert len(missing) == 2 and all("pip install '.[cpu]' or '.[gpu]'" in line for line in missing)
    [doubled] = BOTH.problems()
    assert "onnxruntime 1.32.0 and onnxruntime-gpu 1.31.1" in doubled
    assert "pip uninstall -y onnxruntime onnxruntime-gpu" in doubled


def test_a_worker_needs_what_its_backend_and_cache_import() -> None:
    assert needed_imports("onnxruntime", semantic_cache=False) == ("onnxruntime",)
    assert needed_imports("torch", semantic_cache=False) == ()
    assert needed_imports("torch", semantic_cache=True) == ("onnxruntime", "faiss")


def test_a_cpu_worker_runs_on_either_flavour_but_not_on_none() -> None:
    assert install_refusal("cpu", "onnxruntime", semantic_cache=True, installed=CPU) is None
    assert install_refusal("cpu", "onnxruntime", semantic_cache=True, installed=GPU) is None
    refusal = install_refusal("cpu", "onnxruntime", semantic_cache=False, installed=NONE)
    assert refusal is not None and "`import onnxruntime`" in refusal
    assert install_refusal("cpu", "torch", semantic_cache=False, installed=NONE) is None, "torch needs neither"


@pytest.mark.usefixtures("cpu_provider")
def test_a_cuda_worker_on_the_cpu_wheel_is_refused_with_the_gpu_install() -> None:
    refusal = install_refusal("cuda", "onnxruntime", semantic_cache=False, installed=CPU)
    assert refusal is not None
    assert "needs ONNX Runtime's CUDAExecutionProvider" in refusal and "onnxruntime 1.32.0 (cpu flavour)" in refusal
    assert "pip install '.[gpu]'" in refusal and "compose/Dockerfile.gpu" in refusal
    # The torch backend needs ONNX Runtime's CUDA provider only for the semantic cache's encoder.
    assert install_refusal("cuda", "torch", semantic_cache=True, installed=CPU) == refusal


@pytest.mark.usefixtures("cuda_provider")
def test_a_cuda_worker_on_the_gpu_wheel_passes_and_its_cache_index_needs_no_gpu_faiss() -> None:
    assert install_refusal("cuda", "onnxruntime", semantic_cache=False, installed=GPU) is None
    # The semantic index runs on faiss's CPU code on every device: the CPU faiss serves it too.
    assert install_refusal("cuda", "onnxruntime", semantic_cache=True,
                           installed=Installed({**GPU.providers, "faiss": CPU.providers["faiss"]})) is None


@pytest.mark.usefixtures("cuda_provider")
def test_a_cuda_torch_worker_needs_a_cuda_build_of_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", None)
    refusal = install_refusal("cuda", "torch", semantic_cache=False, installed=GPU)
    assert refusal is not None and "is a CPU-only build" in refusal and "compose/Dockerfile.gpu" in refusal
    monkeypatch.setattr(torch.version, "cuda", "13.2")
    assert install_refusal("cuda", "torch", semantic_cache=False, installed=GPU) is None, \
        "no GPU here, but a GPU is the worker's health to report, not the install's"
