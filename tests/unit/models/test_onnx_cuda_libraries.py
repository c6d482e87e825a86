"""The GPU flavour's CUDA and cuDNN libraries are loaded (once) before a CUDA session opens: ONNX
Runtime's CUDA provider does not find the nvidia-* wheels' libraries by itself (measured on the GPU
flavour without a GPU: the provider failed on libcublasLt.so.13 without the preload, and on
libcuda.so.1, the driver a GPU machine has, with it)."""

from __future__ import annotations

import pytest

from models.backends import onnx


def test_the_libraries_are_preloaded_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[None] = []
    monkeypatch.setattr(onnx.ort, "preload_dlls", lambda: calls.append(None), raising=False)
    onnx.load_cuda_libraries.cache_clear()
    try:
        onnx.load_cuda_libraries()
        onnx.load_cuda_libraries()
    finally:
        onnx.load_cuda_libraries.cache_clear()
    assert len(calls) == 1


def test_a_wheel_without_the_preload_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(onnx.ort, "preload_dlls", raising=False)
    onnx.load_cuda_libraries.cache_clear()
    try:
        onnx.load_cuda_libraries()
    finally:
        onnx.load_cuda_libraries.cache_clear()
