"""attention_backend="auto" on a CUDA GPU without FlashInfer's toolchain: the torch backend
and one warning saying how to get the kernels, decided when the engine starts.

The GPU and FlashInfer's presence are simulated (monkeypatch): the CUDA device and dtype that
``EngineConfig`` resolves, ``find_spec`` as the probe sees it, and where ``nvcc`` is.
"""

from __future__ import annotations

import importlib.machinery
import warnings

import pytest

import agentrt_kernels.flashinfer_toolchain as toolchain
from agentrt import EngineConfig
from agentrt.attention import attention_backend_for
from agentrt.attention.torch_ref import TorchRefBackend
from agentrt_kernels.flashinfer_backend import FlashInferBackend


def _installed(monkeypatch, *names: str) -> None:
    """``find_spec`` as if exactly ``names`` (of flashinfer, flashinfer_jit_cache) were there."""
    def find_spec(name, *args):
        return importlib.machinery.ModuleSpec(name, None) if name in names else None

    monkeypatch.setattr(toolchain.importlib.util, "find_spec", find_spec)


@pytest.fixture
def on_cuda(monkeypatch):
    """EngineConfig resolves a CUDA device in bfloat16 (no GPU is touched)."""
    monkeypatch.setattr(EngineConfig, "resolved_device", property(lambda self: "cuda:0"))
    monkeypatch.setattr(EngineConfig, "resolved_dtype", property(
        lambda self: "bfloat16" if self.dtype == "auto" else self.dtype))


@pytest.fixture
def no_nvcc(monkeypatch, tmp_path):
    for name in ("FLASHINFER_NVCC", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))  # a toolkit folder without bin/nvcc
    return tmp_path


def test_find_nvcc_looks_where_flashinfer_does(no_nvcc, monkeypatch):
    assert toolchain.find_nvcc() is None
    nvcc = no_nvcc / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("")
    assert toolchain.find_nvcc() == nvcc
    monkeypatch.setenv("FLASHINFER_NVCC", str(no_nvcc / "missing"))
    assert toolchain.find_nvcc() is None  # FlashInfer would run that one, and it is not there


def test_without_nvcc_auto_runs_torch_with_one_warning(on_cuda, no_nvcc, monkeypatch):
    _installed(monkeypatch, "flashinfer")
    config = EngineConfig(device="cuda")
    assert config.resolved_attention_backend == "torch"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert attention_backend_for(config) is TorchRefBackend
    assert len(caught) == 1 and caught[0].category is RuntimeWarning
    message = str(caught[0].message)
    for hint in ("nvcc", "CUDA_HOME", "flashinfer-jit-cache", "attention_backend='flashinfer'"):
        assert hint in message


@pytest.mark.parametrize("installed", [("flashinfer", "flashinfer_jit_cache"), ("flashinfer",)])
def test_with_nvcc_or_prebuilt_kernels_auto_runs_flashinfer(on_cuda, no_nvcc, monkeypatch,
                                                           installed):
    _installed(monkeypatch, *installed)
    if installed == ("flashinfer",):  # no prebuilt kernels: nvcc is what makes them
        (no_nvcc / "bin").mkdir()
        (no_nvcc / "bin" / "nvcc").write_text("")
    config = EngineConfig(device="cuda")
    assert config.auto_attention_fallback is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert attention_backend_for(config) is FlashInferBackend


def test_without_flashinfer_the_warning_says_how_to_install_it(on_cuda, monkeypatch):
    _installed(monkeypatch)
    with pytest.warns(RuntimeWarning, match=r"pip install 'agentrt\[gpu\]'"):
        assert attention_backend_for(EngineConfig(device="cuda")) is TorchRefBackend


def test_an_explicit_backend_and_the_cpu_never_probe(on_cuda, monkeypatch):
    def probe():
        raise AssertionError("probed")

    monkeypatch.setattr(toolchain, "flashinfer_unusable_reason", probe)
    assert EngineConfig(device="cuda", attention_backend="torch").auto_attention_fallback is None
    assert EngineConfig(device="cuda", dtype="float32").auto_attention_fallback is None
    monkeypatch.undo()
    assert EngineConfig(device="cpu").auto_attention_fallback is None
