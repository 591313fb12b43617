"""EngineConfig: the quantization choice ("auto" by default) and what it resolves to; the module
imports nothing of agentrt at load time (registries are consulted lazily)."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import get_args

import pytest

import agentrt.config
from agentrt.config import EngineConfig, Quantization
from agentrt.models.linear import FILE_FORMATS, LINEARS


def test_the_default_is_auto_and_the_literal_lists_every_choice():
    assert EngineConfig().quantization == "auto"
    assert sorted(get_args(Quantization)) == sorted([*FILE_FORMATS, *LINEARS])


def test_auto_runs_a_gguf_file_in_its_own_formats_and_a_folder_as_floats(tmp_path):
    assert EngineConfig(device="cpu").resolved_quantization == "gguf"  # the embedded GGUF
    assert EngineConfig(device="cpu").uses_fused_ops
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    folder = EngineConfig(model=str(tmp_path), device="cpu")
    assert folder.resolved_quantization == "none"
    assert not folder.uses_fused_ops
    assert EngineConfig(device="cpu", dtype="bfloat16").resolved_quantization == "none"


@pytest.mark.parametrize("name", ["none", "int8", "int4", "gguf"])
def test_explicit_choices_are_kept(name):
    assert EngineConfig(device="cpu", quantization=name).resolved_quantization == name


def test_unknown_quantization_lists_the_choices():
    with pytest.raises(ValueError, match=r"unknown quantization 'q4'.*'auto', 'gguf'.*'int4'"):
        EngineConfig(quantization="q4")


def test_gguf_blocks_are_cpu_only():
    with pytest.raises(ValueError, match="quantization='gguf' runs on agentrt's CPU kernels"):
        EngineConfig(device="cuda", quantization="gguf")


def test_gguf_needs_a_gguf_file(tmp_path):
    from agentrt.models import load_model

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="folder of float weights"):
        load_model(str(tmp_path), quantization="gguf")


def test_gguf_activations_default_is_auto_and_explicit_choices_are_kept():
    assert EngineConfig().gguf_activations == "auto"
    for name in ("auto", "float32", "int8"):
        assert EngineConfig(gguf_activations=name).resolved_gguf_activations == name


def test_unknown_gguf_activations_lists_the_choices():
    with pytest.raises(ValueError, match=r"unknown gguf_activations 'int4'.*'auto', 'float32', "
                                         r"'int8'"):
        EngineConfig(gguf_activations="int4")  # type: ignore[arg-type]


def test_config_imports_nothing_of_agentrt_at_module_level():
    tree = ast.parse(Path(agentrt.config.__file__).read_text())
    imported = [n.module or "" for n in tree.body if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.split(".")[0] in ("agentrt", "agentrt_kernels")]
