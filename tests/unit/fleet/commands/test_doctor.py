"""`fleet doctor`: the flavour and what it runs on, exit 0 with one flavour, 1 with a line per problem
when none or both are installed, and with --device cuda when a CUDA worker would be refused or sees
no GPU. Through `fleet.cli.main`, as an operator's shell runs it."""

from __future__ import annotations

import json

import onnxruntime
import pytest
import torch

from fleet import cli
from fleet.commands import doctor
from fleet.exits import Exit
from models.backends.flavour import CUDA_PROVIDER, Dist, Installed

BOTH = Installed({"onnxruntime": (Dist("onnxruntime", "1.32.0"), Dist("onnxruntime-gpu", "1.31.1")),
                  "faiss": (Dist("faiss-cpu", "1.15.1"), Dist("faiss-gpu", "1.15.1"))})
NONE = Installed({"onnxruntime": (), "faiss": ()})


def fleet_doctor(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ended:
        cli.main(["doctor", *words])
    code = ended.value.code
    assert isinstance(code, int)
    return code, capsys.readouterr().out


def test_this_install_has_one_flavour_and_says_what_it_runs_on(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = fleet_doctor(capsys)
    assert code == Exit.OK, out
    here = Installed.here()
    lines = dict(line.split(None, 1) for line in out.splitlines() if not line.startswith(" "))
    assert lines["flavour"] == here.flavour and lines["ok:"] == f"flavour {here.flavour}"
    assert lines["onnxruntime"] == str(here.providers["onnxruntime"][0])
    assert lines["faiss"] == str(here.providers["faiss"][0])
    assert lines["torch"].startswith(torch.__version__) and lines["python"].startswith("3.")
    assert f"  providers     {', '.join(onnxruntime.get_available_providers())}" in out.splitlines()


def test_json_has_the_same_facts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = fleet_doctor(capsys, "--json")
    report = json.loads(out)
    assert code == Exit.OK and report["problems"] == []
    assert report["onnxruntime"]["providers"] == onnxruntime.get_available_providers()
    assert set(report["faiss"]) >= {"distributions", "version", "gpu_support", "gpus"}
    assert report["torch"]["cuda_build"] == torch.version.cuda


@pytest.mark.parametrize(("installed", "expected"), [
    (BOTH, ["`import onnxruntime` is provided by both onnxruntime 1.32.0 and onnxruntime-gpu 1.31.1",
            "`import faiss` is provided by both faiss-cpu 1.15.1 and faiss-gpu 1.15.1"]),
    (NONE, ["no installed distribution provides `import onnxruntime`: pip install '.[cpu]' or '.[gpu]'",
            "no installed distribution provides `import faiss`: pip install '.[cpu]' or '.[gpu]'"]),
], ids=["both", "none"])
def test_both_flavours_or_none_fail_with_a_line_each(installed: Installed, expected: list[str],
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Installed, "here", classmethod(lambda cls: installed))
    code, out = fleet_doctor(capsys)
    assert code == Exit.FAILED
    problems = [line.removeprefix("problem: ") for line in out.splitlines() if line.startswith("problem: ")]
    assert len(problems) == len(expected) and all(p.startswith(e) for p, e in zip(problems, expected, strict=True))
    assert "ok:" not in out
    if installed is NONE:
        assert "onnxruntime     not installed" in out and "faiss           not installed" in out


def test_device_cuda_on_the_cpu_wheel_without_a_gpu_names_both_problems(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])
    monkeypatch.setattr(torch.version, "cuda", "13.2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out = fleet_doctor(capsys, "--device", "cuda")
    assert code == Exit.FAILED
    problems = [line for line in out.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 2
    assert f"needs ONNX Runtime's {CUDA_PROVIDER}" in problems[0] and "pip install '.[gpu]'" in problems[0]
    assert problems[1] == f"problem: {doctor.NO_GPU}"


def test_device_cuda_passes_where_the_gpu_wheel_sees_a_gpu(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "examine", lambda device: doctor.Report(
        python="3.11.7 (CPython)", flavour="gpu", onnxruntime={"distributions": ["onnxruntime-gpu 1.31.1"],
                                                              "providers": [CUDA_PROVIDER, "CPUExecutionProvider"]},
        faiss={"distributions": ["faiss-gpu 1.15.1"], "version": "1.15.1", "gpu_support": True, "gpus": 1},
        torch={"version": "2.15.0+cu132", "cuda_build": "13.2", "cuda_available": True, "devices": ["NVIDIA H100"]}))
    code, out = fleet_doctor(capsys, "--device", "cuda")
    assert code == Exit.OK
    assert "  GPU support   yes, 1 GPU(s) visible" in out and "  CUDA devices  NVIDIA H100" in out
    assert out.splitlines()[-1] == "ok: flavour gpu, CUDA usable"
